package httpmw_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/callguard/callguard"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/timeout"
)

// TestRejectionShape: a bulkhead of one slot and no queue refuses a
// second request while the first runs, and an open breaker refuses one
// before it is sent: by default, each is an error from the client that
// matches callguard.ErrRejected or breaker.ErrOpen; with
// RejectionResponses, each is a 503 marked RejectedHeader. Either way the
// server sees only the first request.
func TestRejectionShape(t *testing.T) {
	for _, asResponses := range []bool{false, true} {
		t.Run(fmt.Sprintf("RejectionResponses=%t", asResponses), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var opts []httpmw.Option
				if asResponses {
					opts = append(opts, httpmw.RejectionResponses())
				}
				bh := must(limit.NewBulkhead(limit.BulkheadSettings{MaxConcurrent: 1}))
				b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
				srv, client := newVirtual(t, func(int64, *http.Request, []byte) testserver.HTTPAnswer {
					return testserver.HTTPAnswer{Body: "ok", Delay: 100 * time.Millisecond}
				}, must(chain.New(bh, b)), opts...)
				first := make(chan error)
				go func() {
					resp, err := client.Get(srv.URL)
					if err == nil {
						resp.Body.Close()
					}
					first <- err
				}()
				time.Sleep(10 * time.Millisecond)
				b.ForceOpen()
				for _, tc := range []struct {
					what, mark string
					is         error
				}{{"the bulkhead's", "limit", callguard.ErrRejected}} {
					resp, err := client.Get(srv.URL)
					switch {
					case asResponses && (err != nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(resp.Header.Get(httpmw.RejectedHeader), tc.mark)):
						t.Errorf("%s rejection: %v, %v; want a 503 marked %s", tc.what, resp, err, httpmw.RejectedHeader)
					case !asResponses && !errors.Is(err, tc.is):
						t.Errorf("%s rejection: %v, %v; want an error matching %v", tc.what, resp, err, tc.is)
					}
					if err == nil {
						resp.Body.Close()
					}
				}
				if err := <-first; err != nil {
					t.Error(err)
				}
				resp, err := client.Get(srv.URL) // the bulkhead is free, the breaker forced open
				switch {
				case asResponses && (err != nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(resp.Header.Get(httpmw.RejectedHeader), "open")):
					t.Errorf("the breaker's rejection: %v, %v; want a 503 marked %s", resp, err, httpmw.RejectedHeader)
				case !asResponses && !errors.Is(err, breaker.ErrOpen):
					t.Errorf("the breaker's rejection: %v, %v; want an error matching breaker.ErrOpen", resp, err)
				}
				if err == nil {
					resp.Body.Close()
				}
				if n := srv.Received.Load(); n != 1 {
					t.Errorf("server received %d requests; want 1", n)
				}
			})
		})
	}
}

// TestHedgedGET: the server's first answer takes 1 s, the next 10 ms; a
// GET hedged after 20 ms gets the hedge's body at 30 ms. The loser's
// response is drained and closed.
func TestHedgedGET(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		h := must(hedge.New(hedge.Settings{Delay: 20 * time.Millisecond}))
		srv, client := newVirtual(t, func(int64, *http.Request, []byte) testserver.HTTPAnswer {
			if n.Add(1) == 1 {
				return testserver.HTTPAnswer{Body: "slow", Delay: time.Second}
			}
			return testserver.HTTPAnswer{Body: "fast", Delay: 10 * time.Millisecond}
		}, must(chain.New(h, must(timeout.New(5*time.Second)))))
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		req := must(http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil && !errors.Is(err, io.EOF) || string(body) != "fast" || time.Since(start) != 30*time.Millisecond {
			t.Errorf("got %q (%v) after %v; want \"fast\" after 30ms", body, err, time.Since(start))
		}
		if s := h.Stats(); s.Hedges != 1 || s.Wins != 1 {
			t.Errorf("hedge stats %+v; want 1 hedge, 1 win", s)
		}
	})
}

// TestOverloaded: through the transport, a 429 is an overload refusal
// the breaker leaves out with IsExcluded: httpmw.Overloaded; a 503 is
// not (it also means down) and opens it.
func TestOverloaded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, IsExcluded: httpmw.Overloaded}))
		var n atomic.Int64
		srv, client := newVirtual(t, func(int64, *http.Request, []byte) testserver.HTTPAnswer {
			if n.Add(1) == 1 {
				return testserver.HTTPAnswer{Status: http.StatusTooManyRequests}
			}
			return testserver.HTTPAnswer{Status: http.StatusServiceUnavailable}
		}, must(chain.New(b)))
		for i, want := range []breaker.State{breaker.StateClosed, breaker.StateOpen} {
			resp, err := client.Get(srv.URL)
			if err == nil {
				resp.Body.Close()
			}
			if b.State() != want {
				t.Errorf("after answer %d: breaker %v; want %v", i+1, b.State(), want)
			}
		}
		if httpmw.Overloaded(errors.New("x")) {
			t.Error("Overloaded(a plain error) = true")
		}
	})
}

// TestUnhedgedPOSTKeepsTimeout: a request that is not hedged (a POST) in
// a chain whose hedge makes the attempt timeout's context still has its
// attempt timeout.
func TestUnhedgedPOSTKeepsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := must(hedge.New(hedge.Settings{Delay: 20 * time.Millisecond}))
		srv, client := newVirtual(t, func(int64, *http.Request, []byte) testserver.HTTPAnswer {
			return testserver.HTTPAnswer{Body: "late", Delay: time.Second}
		}, must(chain.New(h, must(timeout.New(100*time.Millisecond)))))
		start := time.Now()
		resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("x"))
		if err == nil {
			resp.Body.Close()
		}
		if err == nil || time.Since(start) != 100*time.Millisecond {
			t.Errorf("POST: %v after %v; want the 100ms attempt timeout", err, time.Since(start))
		}
	})
}

// TestHedgeFailureDiscarded: the hedge answers 503 at once, the first
// attempt 200 later: the caller gets the 200, and the 503's body is
// closed.
func TestHedgeFailureDiscarded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		var failed *closeCounter
		var mu sync.Mutex
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if n.Add(1) == 1 {
				time.Sleep(100 * time.Millisecond)
				resp, _ := answer(200, nil, "ok")
				return resp, nil
			}
			resp, c := answer(503, nil, "busy")
			mu.Lock()
			failed = c
			mu.Unlock()
			return resp, nil
		})
		h := must(hedge.New(hedge.Settings{Delay: 20 * time.Millisecond}))
		client := &http.Client{Transport: must(httpmw.New(base, must(chain.New(h, must(timeout.New(time.Second))))))}
		resp, err := client.Get("http://callguard.test/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		mu.Lock()
		defer mu.Unlock()
		if resp.StatusCode != 200 || string(body) != "ok" || failed == nil || failed.closes.Load() == 0 {
			t.Errorf("got %d %q; the hedge's 503 body closed: %v; want 200 ok and the 503 closed", resp.StatusCode, body, failed != nil && failed.closes.Load() > 0)
		}
	})
}

// TestHedgedFailureReadable: when every attempt fails, the failure the
// caller gets has a body it can read in full, as without a hedge.
func TestHedgedFailureReadable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		big := strings.Repeat("x", 1<<20)
		h := must(hedge.New(hedge.Settings{Delay: 20 * time.Millisecond}))
		srv, client := newVirtual(t, func(int64, *http.Request, []byte) testserver.HTTPAnswer {
			return testserver.HTTPAnswer{Status: http.StatusServiceUnavailable, Body: big, Delay: 50 * time.Millisecond, BodyDelay: 10 * time.Millisecond}
		}, must(chain.New(h, must(timeout.New(time.Second)))))
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || len(b) != len(big) || err != nil {
			t.Errorf("got %d, read %d bytes, %v; want 503 and the whole body", resp.StatusCode, len(b), err)
		}
	})
}

// TestTooManyRequestsRetriedOnlyWhenTold: a 429 without Retry-After is not
// retried (the caller gets it after one request), as grpcmw does not retry
// a ResourceExhausted without a pushback; with Retry-After it is retried
// after it.
func TestTooManyRequestsRetriedOnlyWhenTold(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retryAfter string
		requests   int64
		status     int
	}{
		{"no Retry-After", "", 1, http.StatusTooManyRequests},
		{"Retry-After: 1", "1", 2, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, client := newVirtual(t, func(n int64, _ *http.Request, _ []byte) testserver.HTTPAnswer {
					if n == 1 {
						return testserver.HTTPAnswer{Status: http.StatusTooManyRequests, RetryAfter: tc.retryAfter}
					}
					return testserver.HTTPAnswer{Body: "ok"}
				}, must(chain.New(threeAttempts())))
				resp, err := client.Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if srv.Received.Load() != tc.requests || resp.StatusCode != tc.status {
					t.Errorf("%d requests, status %d; want %d, %d", srv.Received.Load(), resp.StatusCode, tc.requests, tc.status)
				}
			})
		})
	}
}
