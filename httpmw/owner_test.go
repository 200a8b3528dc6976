package httpmw_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// lateReturn is a policy that returns its call's result d after the call
// returned: what is outside it (a hedge) hears of an answer late.
type lateReturn struct{ d time.Duration }

func (l lateReturn) Do(ctx context.Context, call func(context.Context) error) error {
	err := call(ctx)
	time.Sleep(l.d)
	return err
}

// deafBase answers the n-th request (from 1) with answer(n) after its
// delay, whatever the request's context: a server that answered just as
// the client gave up.
func deafBase(received *atomic.Int64, answer func(n int64) (int, string, time.Duration)) roundTripFunc {
	return func(r *http.Request) (*http.Response, error) {
		status, body, d := answer(received.Add(1))
		time.Sleep(d)
		return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	}
}

// TestLateHedgeKeepsWinner: the first attempt's 200 arrives at 9 ms, the
// hedge's delay ends at 10 ms, before the hedge hears of the answer
// (11 ms): the hedge that starts then is refused before it is sent, and
// the caller gets the winner's body; the hedge's token is given back.
// With a breaker inside, its permit is reported once (run with -race).
func TestLateHedgeKeepsWinner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := must(hedge.New(hedge.Settings{Delay: 10 * time.Millisecond}))
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1}))
		srv, client := newVirtual(t, func(n int64, _ *http.Request, _ []byte) testserver.HTTPAnswer {
			if n == 1 {
				return testserver.HTTPAnswer{Body: "first", Delay: 9 * time.Millisecond}
			}
			return testserver.HTTPAnswer{Body: "hedge", Delay: time.Millisecond}
		}, must(chain.New(h, lateReturn{2 * time.Millisecond}, b, must(timeout.New(time.Second)))))
		resp, err := client.Get("http://callguard.test/")
		if err != nil {
			t.Fatalf("Get: %v; want the first attempt's 200", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "first" || srv.Received.Load() != 1 {
			t.Errorf("got %q with %d requests sent; want \"first\" with 1", body, srv.Received.Load())
		}
		if s := h.Stats(); s.Calls != 1 || s.Hedges != 0 {
			t.Errorf("hedge stats %+v; want 1 call, 0 hedges (the late one was not sent)", s)
		}
		if c := b.Counts(); c.Successes != 1 || c.Failures != 0 {
			t.Errorf("breaker counts %+v; want 1 success", c)
		}
	})
}

// TestLostHedgeKeepsToken: the hedge is sent at 10 ms and answers 200 at
// 20 ms, after the first attempt's 200 at 15 ms: it lost the race after it
// was sent, so it stays counted (Stats.Hedges 1) and its token spent;
// the caller gets the first answer.
func TestLostHedgeKeepsToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := must(hedge.New(hedge.Settings{Delay: 10 * time.Millisecond, Burst: 1}))
		var received atomic.Int64
		base := deafBase(&received, func(n int64) (int, string, time.Duration) {
			if n == 1 {
				return 200, "first", 15 * time.Millisecond
			}
			return 200, "hedge", 10 * time.Millisecond
		})
		tr := must(httpmw.New(base, must(chain.New(h, must(timeout.New(time.Second))))))
		resp, err := get0(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "first" || received.Load() != 2 {
			t.Errorf("got %q with %d requests sent; want \"first\" with 2", body, received.Load())
		}
		if s := h.Stats(); s != (hedge.Stats{Calls: 1, Hedges: 1}) {
			t.Errorf("hedge stats %+v; want {Calls:1 Hedges:1 Wins:0}", s)
		}
		// The one token of the burst is spent: the next slow call is not
		// hedged (a deposit of 5 % is not a token).
		resp, err = get0(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if s := h.Stats(); s.Hedges != 1 || received.Load() != 3 {
			t.Errorf("after a second call, hedge stats %+v with %d requests; want still 1 hedge, 3 requests", s, received.Load())
		}
	})
}

// TestRetriedFailureReleasesConnection: a 503 that will be retried after
// 300 ms, longer than the 100 ms attempt timeout, gives its connection
// back at once (its body read into memory): the three attempts share one
// TCP connection, and the caller still reads the last failure's body.
func TestRetriedFailureReleasesConnection(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "busy")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	r := must(retry.New(retry.MaxAttempts(3), retry.Constant(300*time.Millisecond), retry.Jitter(0)))
	client := &http.Client{Transport: must(httpmw.New(base, must(chain.New(r, must(timeout.New(100*time.Millisecond))))))}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 503 || string(body) != "busy" {
		t.Errorf("got %d %q (%v); want the last 503 with its body", resp.StatusCode, body, err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d TCP connections for 3 attempts; want 1", n)
	}
}

// TestHedgedFailureAfterWinIgnored: a hedge's 503 that arrives after the
// first attempt's 200 does not replace it.
func TestHedgedFailureAfterWinIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := must(hedge.New(hedge.Settings{Delay: 10 * time.Millisecond}))
		var received atomic.Int64
		base := deafBase(&received, func(n int64) (int, string, time.Duration) {
			if n == 1 {
				return 200, "first", 15 * time.Millisecond
			}
			return 503, "hedge", 6 * time.Millisecond
		})
		tr := must(httpmw.New(base, must(chain.New(h, lateReturn{10 * time.Millisecond}, must(timeout.New(time.Second))))))
		resp, err := get0(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "first" || received.Load() != 2 {
			t.Errorf("got %d %q with %d requests sent; want 200 \"first\" with 2", resp.StatusCode, body, received.Load())
		}
	})
}
