package reliability

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// fds returns the number of file descriptors the process has open.
func fds(t testing.TB) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd here: %v", err)
	}
	return len(es)
}

// baseline is the process's goroutines and file descriptors before a suite.
type baseline struct{ goroutines, fds int }

func snapshot(t testing.TB) baseline {
	return baseline{runtime.NumGoroutine(), fds(t)}
}

// back waits up to 10 s for the goroutines and file descriptors to come
// back to b (a few goroutines of the runtime and net/http may take a
// moment to end), and fails the test if they do not.
func (b baseline) back(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, f := runtime.NumGoroutine(), fds(t)
		if g <= b.goroutines && f <= b.fds {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			n := runtime.Stack(buf, true)
			t.Fatalf("after the suite: %d goroutines (before: %d), %d file descriptors (before: %d)\n%s", g, b.goroutines, f, b.fds, buf[:n])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// outcome is how a call ended, for the accounting.
type outcome int

const (
	ok outcome = iota
	failed
	rejected
)

// classify sorts a call's error: rejected is a breaker's refusal (before
// any attempt, or ending the retries).
func classify(err error) outcome {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, breaker.ErrOpen):
		return rejected
	}
	return failed
}

// classifyHTTP sorts a request's result: the last failing response, which
// the caller gets when retries end, is a failure; with BreakerHeader, the
// breaker ended them.
func classifyHTTP(resp *http.Response, err error) outcome {
	if err != nil {
		return classify(err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		return ok
	case resp.Header.Get("Callguard-Breaker") == "open":
		return rejected
	}
	return failed
}

// tally counts the outcomes of calls.
type tally [3]int

func (t tally) String() string {
	return fmt.Sprintf("%d ok, %d failed, %d rejected", t[ok], t[failed], t[rejected])
}

func (t tally) total() int { return t[ok] + t[failed] + t[rejected] }

// recommended is the chain docs/ordering.md recommends, with an attempt
// timeout of attempt.
func recommended(attempt time.Duration) *chain.Chain {
	r := must(retry.New(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second)))
	b := must(breaker.New(breaker.Settings{OpenTimeout: time.Second, HalfOpenSuccesses: 2}))
	t := must(timeout.New(attempt, timeout.Latency(0.99, attempt/3)))
	return must(chain.New(r, b, t))
}

// memory reads the heap the process's objects take and the memory its
// goroutine stacks take, in bytes.
func memory() (heap, stacks uint64) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}
