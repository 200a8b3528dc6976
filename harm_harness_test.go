package callguard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/preset"
)

// Do no harm (docs/faults.md): wherever a plain client with the same
// deadline succeeds, the recommended chain succeeds at least as often.
// These tests drive httpmw.Standard and a plain client side by side, in
// virtual time, against downstreams that are not down: slower, flaky, or
// with one bad backend of ten. The real-fault suite (bench/faults) runs
// the same faults over real sockets through a fault proxy.

// vAnswer is how a virtual downstream answers a request that arrives at
// since (from the run's start), to backend b: after delay, with status.
type vAnswer func(since time.Duration, b int, rng *rand.Rand) (delay time.Duration, status int)

// vBody, if set, is how long the body of an answer to a request that
// arrived at since takes after its headers.
type vBody func(since time.Duration) time.Duration

// vServer is a base RoundTripper in virtual time: backends answer as answer
// says; with backends > 1 a connection pool picks the backend as net/http's
// keep-alive pool does (the most recently used idle connection first, a
// new connection to the next backend in turn when none is idle), so that a
// request goes back to the backend that just answered.
type vServer struct {
	answer   vAnswer
	body     vBody
	start    time.Time
	backends int

	mu       sync.Mutex
	idle     []int // backends of idle connections, the most recent last
	next     int   // backend of the next new connection
	rng      *rand.Rand
	received []int64         // per backend
	arrivals []time.Duration // when each request arrived, since start
}

func newVServer(backends int, seed uint64, answer vAnswer) *vServer {
	return &vServer{answer: answer, start: time.Now(), backends: backends,
		rng: rand.New(rand.NewPCG(seed, 1)), received: make([]int64, backends)}
}

func (s *vServer) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	var b int
	if n := len(s.idle); n > 0 {
		b, s.idle = s.idle[n-1], s.idle[:n-1]
	} else {
		b, s.next = s.next, (s.next+1)%s.backends
	}
	s.received[b]++
	s.arrivals = append(s.arrivals, time.Since(s.start))
	d, status := s.answer(time.Since(s.start), b, s.rng)
	s.mu.Unlock()
	switch status {
	case hang:
		<-r.Context().Done()
		return nil, r.Context().Err()
	case refuse:
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil, errRefused
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return nil, r.Context().Err() // the connection is closed: not reused
	}
	s.mu.Lock()
	s.idle = append(s.idle, b)
	s.mu.Unlock()
	body := io.NopCloser(strings.NewReader("ok"))
	if s.body != nil && s.body(time.Since(s.start)) > 0 {
		body = &slowBody{ctx: r.Context(), wait: s.body(time.Since(s.start))}
	}
	return &http.Response{StatusCode: status, Header: http.Header{}, ContentLength: 2,
		Body: body, Request: r}, nil
}

// slowBody is a body whose bytes come wait after the headers, or never if
// its request's context ends first (a read then fails with its error, as a
// body read from a real connection does).
type slowBody struct {
	ctx  context.Context
	wait time.Duration
	read bool
}

func (b *slowBody) Read(p []byte) (int, error) {
	if b.read {
		return 0, io.EOF
	}
	t := time.NewTimer(b.wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	}
	b.read = true
	return copy(p, "ok"), nil
}

func (b *slowBody) Close() error { return nil }

// The statuses that are not answers: an answer that never comes, and a
// connection refused at once.
const (
	hang   = -1
	refuse = -2
)

var errRefused = errors.New("connection refused")

// ReceivedIn returns the requests that arrived in [from, to).
func (s *vServer) ReceivedIn(from, to time.Duration) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, at := range s.arrivals {
		if at >= from && at < to {
			n++
		}
	}
	return n
}

// Received returns the requests each backend received.
func (s *vServer) Received() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.received...)
}

// vArm is what one client did over a run, counted by when calls started.
type vArm struct {
	name               string
	ok, calls, refused [3]int // before, during and after the fault
	shed               [3]int // refused by a limit (callguard.ErrRejected)
	received           []int64
	received1          int64           // calls the downstream received during the fault
	failedLate         []time.Duration // how long each request started in the fault's last two thirds took to fail
	firstOKAfterFault  time.Duration   // from the fault's end; -1: none
	lastErr            error
}

// harmRun is a run: callers in a closed loop, each request with deadline,
// over warm + fault + after; the fault is [warm, warm+fault).
type harmRun struct {
	callers            int
	deadline           time.Duration
	warm, fault, after time.Duration
	backends           int
	answer             vAnswer
	body               vBody
	seed               uint64
	settings           preset.Settings
}

// run drives a plain client and httpmw.Standard side by side, each with a
// downstream of its own, in a synctest bubble.
func (h harmRun) run(t *testing.T) (plain, standard vArm) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		phase := func(at time.Time) int {
			switch d := at.Sub(start); {
			case d < h.warm:
				return 0
			case d < h.warm+h.fault:
				return 1
			}
			return 2
		}
		end := start.Add(h.warm + h.fault + h.after)
		drive := func(name string, rt http.RoundTripper, srv *vServer) vArm {
			a := vArm{name: name, firstOKAfterFault: -1}
			var mu sync.Mutex
			var wg sync.WaitGroup
			client := &http.Client{Transport: rt}
			for range h.callers {
				wg.Go(func() {
					for time.Now().Before(end) {
						at := time.Now()
						ctx, cancel := context.WithTimeout(context.Background(), h.deadline)
						req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://downstream.test/", nil)
						resp, err := client.Do(req)
						ok := err == nil && resp.StatusCode == http.StatusOK
						if err == nil {
							if _, rerr := io.Copy(io.Discard, resp.Body); rerr != nil {
								ok, err = false, rerr // the answer is the whole body
							}
							_ = resp.Body.Close()
						}
						cancel()
						p := phase(at)
						mu.Lock()
						a.calls[p]++
						if !ok && p == 1 && at.Sub(start) >= h.warm+h.fault/3 {
							a.failedLate = append(a.failedLate, time.Since(at))
						}
						if ok {
							a.ok[p]++
							if p == 2 && a.firstOKAfterFault < 0 {
								a.firstOKAfterFault = at.Sub(start) - h.warm - h.fault
							}
						} else if errors.Is(err, breaker.ErrOpen) {
							a.refused[p]++
							a.lastErr = err
						} else if errors.Is(err, callguard.ErrRejected) {
							a.shed[p]++
							a.lastErr = err
						} else if err != nil {
							a.lastErr = err
						}
						mu.Unlock()
						if !ok && time.Since(at) < time.Millisecond {
							time.Sleep(time.Millisecond) // a refused caller does not spin
						}
					}
				})
			}
			wg.Wait()
			a.received = srv.Received()
			a.received1 = srv.ReceivedIn(h.warm, h.warm+h.fault)
			return a
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			srv := newVServer(h.backends, h.seed, h.answer)
			srv.body = h.body
			plain = drive("plain", srv, srv)
		})
		wg.Go(func() {
			srv := newVServer(h.backends, h.seed, h.answer)
			srv.body = h.body
			tr, err := httpmw.Standard(srv, h.settings)
			if err != nil {
				t.Errorf("httpmw.Standard: %v", err)
				return
			}
			standard = drive("standard", tr, srv)
		})
		wg.Wait()
	})
	return plain, standard
}

func (a vArm) String() string {
	return fmt.Sprintf("%s: %d of %d succeeded during the fault (%d refused by the breaker, %d by the limit); before %d/%d, after %d/%d; last error: %v",
		a.name, a.ok[1], a.calls[1], a.refused[1], a.shed[1], a.ok[0], a.calls[0], a.ok[2], a.calls[2], a.lastErr)
}

// rate is the share of the requests started in phase p that succeeded.
func (a vArm) rate(p int) float64 { return float64(a.ok[p]) / float64(max(a.calls[p], 1)) }

// noHarm fails t unless the requests standard started during phase p (0
// before, 1 during, 2 after the fault) succeeded at least share as often as
// plain's, less one request per caller: the requests in flight when the
// fault begins were sent under the healthy regime's settings. A request is
// what a user waits for: in a closed loop the count of successes also
// follows how long each request takes (a retry's wait makes fewer, surer
// requests), so the invariant is on the rate.
func noHarm(t *testing.T, what string, p int, plain, standard vArm, share float64, callers int) {
	t.Helper()
	if standard.rate(p) < share*plain.rate(p)-float64(callers)/float64(max(standard.calls[p], 1)) {
		t.Errorf("%s: Standard's requests succeeded %.1f %% of the time against a plain client's %.1f %% (want >= %.0f %% of it, less one request per caller)\n%v\n%v",
			what, 100*standard.rate(p), 100*plain.rate(p), 100*share, plain, standard)
	}
}

// lognormalish returns a latency around m: m × (0.5 … 1.5).
func around(m time.Duration, rng *rand.Rand) time.Duration {
	return time.Duration(float64(m) * (0.5 + rng.Float64()))
}
