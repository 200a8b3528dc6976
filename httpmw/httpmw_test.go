package httpmw_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func always(status int) func(int64, *http.Request, []byte) testserver.HTTPAnswer {
	return func(int64, *http.Request, []byte) testserver.HTTPAnswer { return testserver.HTTPAnswer{Status: status} }
}

// newServer starts a loopback server, and a client through c with its own
// base transport (closed at the end, so that goleak sees no idle conns).
func newServer(t *testing.T, answer func(int64, *http.Request, []byte) testserver.HTTPAnswer, c *chain.Chain, opts ...httpmw.Option) (*testserver.HTTP, *http.Client, *http.Transport) {
	t.Helper()
	srv := testserver.NewHTTP(answer)
	t.Cleanup(srv.Close)
	base := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(base.CloseIdleConnections)
	return srv, &http.Client{Transport: must(httpmw.New(base, c, opts...))}, base
}

// threeAttempts is a retry of 3 attempts, exactly 1 ms apart.
func threeAttempts(opts ...retry.Option) *retry.Policy {
	return must(retry.New(append([]retry.Option{retry.MaxAttempts(3), retry.Constant(time.Millisecond), retry.Jitter(0)}, opts...)...))
}

// noWait is a retry of 3 attempts without a wait between them, for the
// tests on real sockets, which assert nothing of time.
func noWait() *retry.Policy { return threeAttempts(retry.Constant(0)) }

func get(t *testing.T, client *http.Client, url string) (*http.Response, error) {
	t.Helper()
	resp, err := client.Get(url)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// TestSeedC1OverHTTP: the server always answers 503; 12 requests, 3
// attempts 1 ms apart; 15 calls with the retry inside the breaker, 5
// outside. The caller gets the last 503 as a response, or the breaker's
// rejection. In virtual time: with the retry inside, each of the first 5
// requests takes its two 1 ms waits and the 7 rejected ones none; with it
// outside, the second request gives up at once when its failure opens the
// breaker, not waiting only to be rejected, and the 10 after it are
// rejected at once.
func TestSeedC1OverHTTP(t *testing.T) {
	for _, tc := range []struct {
		name     string
		outside  bool
		received int64
		took     []time.Duration // each request's
	}{
		{"breaker wraps retry", false, 15, []time.Duration{ms(2), ms(2), ms(2), ms(2), ms(2), 0, 0, 0, 0, 0, 0, 0}},
		{"retry wraps breaker", true, 5, []time.Duration{ms(2), ms(1), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: time.Minute}))
				order := []chain.Policy{b, threeAttempts()}
				if tc.outside {
					order = []chain.Policy{threeAttempts(), b}
				}
				srv, client := newVirtual(t, always(503), must(chain.New(order...)))
				var took []time.Duration
				for range 12 {
					start := time.Now()
					resp, err := get(t, client, srv.URL)
					took = append(took, time.Since(start))
					if (err == nil && resp.StatusCode != 503) || (err != nil && !errors.Is(err, breaker.ErrOpen)) {
						t.Fatalf("got %v, %v; want the 503 or ErrOpen", resp, err)
					}
				}
				if got := srv.Received.Load(); got != tc.received {
					t.Errorf("server received %d requests, want %d", got, tc.received)
				}
				if !slices.Equal(took, tc.took) {
					t.Errorf("the requests took %v, want exactly %v", took, tc.took)
				}
			})
		})
	}
}

// TestSeedC3OverHTTP: the breaker open, the default fails at once;
// RetryWhenOpen waits its backoff, exactly 2 × 100 ms in virtual time.
func TestSeedC3OverHTTP(t *testing.T) {
	for _, whenOpen := range []bool{false, true} {
		inBubble(t, fmt.Sprintf("RetryWhenOpen=%t", whenOpen), func(t *testing.T) {
			opts := []retry.Option{retry.MaxAttempts(3), retry.Constant(100 * time.Millisecond), retry.Jitter(0)}
			if whenOpen {
				opts = append(opts, retry.RetryWhenOpen())
			}
			b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
			srv, client := newVirtual(t, always(503), must(chain.New(must(retry.New(opts...)), b)))
			// 503, and the breaker opens. With RetryWhenOpen the retry would
			// wait out the hour of the open stay: the caller's deadline makes
			// it give up at once instead, with the 503.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			start := time.Now()
			resp, err := client.Do(req)
			if err != nil || resp.StatusCode != 503 || time.Since(start) != 0 {
				t.Errorf("RetryWhenOpen=%t: the opening request got %v, %v after %v; want the 503 at once", whenOpen, resp, err, time.Since(start))
			}
			if err == nil {
				resp.Body.Close()
			}
			cancel()
			start = time.Now()
			_, err = get(t, client, srv.URL)
			took := time.Since(start)
			if !errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("got %v, want ErrOpen", err)
			}
			want := time.Duration(0)
			if whenOpen {
				want = 200 * time.Millisecond
			}
			if took != want || srv.Received.Load() != 1 {
				t.Errorf("RetryWhenOpen=%t: failed after %v, the server received %d; want exactly %v, and 1", whenOpen, took, srv.Received.Load(), want)
			}
		})
	}
}

// TestClassification: 4xx are answers, 5xx and 429 failures. In virtual
// time: a 4xx is never retried (no wait); with 5xx failures, the first
// request waits 1 ms for its second attempt, whose failure opens the
// breaker, and nothing after that waits; a 429 without Retry-After is not
// retried (each of the first two requests one attempt, the second opens
// the breaker; before, it was retried like a 5xx: 2 requests after 1 ms).
func TestClassification(t *testing.T) {
	for _, tc := range []struct {
		status   int
		received int64 // 4 requests, 3 attempts, breaker trips on 2 failures
		state    breaker.State
		took     time.Duration // the 4 requests in all
	}{
		{404, 4, breaker.StateClosed, 0},
		{400, 4, breaker.StateClosed, 0},
		{500, 2, breaker.StateOpen, ms(1)},
		{503, 2, breaker.StateOpen, ms(1)},
		{429, 2, breaker.StateOpen, 0},
	} {
		inBubble(t, fmt.Sprint(tc.status), func(t *testing.T) {
			b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 2, OpenTimeout: time.Hour}))
			srv, client := newVirtual(t, always(tc.status), must(chain.New(threeAttempts(), b)))
			start := time.Now()
			for range 4 {
				_, _ = get(t, client, srv.URL)
			}
			took := time.Since(start)
			if srv.Received.Load() != tc.received || b.State() != tc.state || took != tc.took {
				t.Errorf("%d: server received %d, breaker %v, after %v; want %d, %v, after exactly %v", tc.status, srv.Received.Load(), b.State(), took, tc.received, tc.state, tc.took)
			}
		})
	}
}

// TestLastStatusIsAResponse: when the attempts run out on a 503, the
// caller gets the last one as a response; in virtual time, the attempts
// come exactly 1 ms apart, and the response after the last.
func TestLastStatusIsAResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, client := newVirtual(t, func(n int64, _ *http.Request, _ []byte) testserver.HTTPAnswer {
			return testserver.HTTPAnswer{Status: 503, Body: fmt.Sprintf("attempt %d", n)}
		}, must(chain.New(threeAttempts())))
		resp, body, took := timedGet(t, client, srv.URL)
		if resp.StatusCode != 503 || string(body) != "attempt 3" || srv.Received.Load() != 3 {
			t.Errorf("got %d %q after %d requests, want the 3rd attempt's 503", resp.StatusCode, body, srv.Received.Load())
		}
		if at := srv.Arrivals(); !slices.Equal(at, []time.Duration{0, ms(1), ms(2)}) || took != ms(2) {
			t.Errorf("attempts at %v, the response after %v; want exactly 0, 1ms, 2ms, and 2ms", at, took)
		}
	})
}

// TestNonIdempotentNotRetried: a POST is sent once, unless it has an
// Idempotency-Key or the transport RetryAll; a body without GetBody is
// never replayed. In virtual time, each retry comes after exactly its 1 ms
// backoff, and a request sent once returns at once.
func TestNonIdempotentNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, client := newVirtual(t, always(503), must(chain.New(threeAttempts())))
		send := func(name string, c *http.Client, req *http.Request) int64 {
			t.Helper()
			before, start := srv.Received.Load(), time.Now()
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			n := srv.Received.Load() - before
			if took, want := time.Since(start), time.Duration(n-1)*time.Millisecond; took != want {
				t.Errorf("%s: %d attempts took %v, want exactly %v", name, n, took, want)
			}
			return n
		}
		post := func(name, key string, c *http.Client) int64 {
			t.Helper()
			req := must(http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x")))
			if key != "" {
				req.Header.Set("Idempotency-Key", key)
			}
			return send(name, c, req)
		}
		if n := post("POST", "", client); n != 1 {
			t.Errorf("POST: %d attempts, want 1", n)
		}
		if n := post("POST with Idempotency-Key", "k1", client); n != 3 {
			t.Errorf("POST with Idempotency-Key: %d attempts, want 3", n)
		}
		all := &http.Client{Transport: must(httpmw.New(srv, must(chain.New(threeAttempts())), httpmw.RetryAll()))}
		if n := post("POST with RetryAll", "", all); n != 3 {
			t.Errorf("POST with RetryAll: %d attempts, want 3", n)
		}
		// A body without GetBody cannot be replayed: no retry.
		req := must(http.NewRequest(http.MethodPut, srv.URL, io.NopCloser(strings.NewReader("x"))))
		if n := send("PUT without GetBody", client, req); n != 1 {
			t.Errorf("PUT without GetBody: %d attempts, want 1", n)
		}
	})
}

// TestReplayedBodies: 1,000 POSTs with an Idempotency-Key, each failing
// once; the server checks that the retried body equals the first, byte for
// byte. On a real socket, for the bodies as sent on the wire; the retries
// do not wait (what is checked is bytes, not time).
func TestReplayedBodies(t *testing.T) {
	var mu sync.Mutex
	first := map[string][]byte{}
	var mismatches atomic.Int64
	srv, client, _ := newServer(t, func(_ int64, r *http.Request, body []byte) testserver.HTTPAnswer {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := first[key]; ok {
			if !bytes.Equal(prev, body) {
				mismatches.Add(1)
			}
			return testserver.HTTPAnswer{Status: 201}
		}
		first[key] = body
		return testserver.HTTPAnswer{Status: 503}
	}, must(chain.New(noWait())))
	for i := range 1000 {
		payload := bytes.Repeat([]byte{byte(i)}, 1+i*7%4096)
		req := must(http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(payload)))
		req.Header.Set("Idempotency-Key", fmt.Sprint("key-", i))
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode != 201 {
			t.Fatalf("request %d: %v %v", i, resp, err)
		}
		resp.Body.Close()
	}
	if mismatches.Load() != 0 || srv.Received.Load() != 2000 {
		t.Errorf("%d bodies differed, %d requests; want 0 and 2000", mismatches.Load(), srv.Received.Load())
	}
}

// countingTransport counts the response bodies it hands out and closes.
type countingTransport struct {
	base           http.RoundTripper
	opened, closed atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		c.opened.Add(1)
		resp.Body = &countingBody{ReadCloser: resp.Body, closed: &c.closed}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	closed *atomic.Int64
	once   sync.Once
}

func (b *countingBody) Close() error {
	b.once.Do(func() { b.closed.Add(1) })
	return b.ReadCloser.Close()
}

// TestDiscardedBodiesClosed: 10,000 requests, each retried once after a 503
// with a body; every body the transport discarded is closed, connections
// are reused (the server sees a bounded number), and no goroutine leaks.
// On a real socket, for the connections; the retries do not wait.
func TestDiscardedBodiesClosed(t *testing.T) {
	var seen sync.Map
	srv := testserver.NewHTTP(func(_ int64, r *http.Request, _ []byte) testserver.HTTPAnswer {
		if _, again := seen.LoadOrStore(r.URL.RawQuery, true); !again {
			return testserver.HTTPAnswer{Status: 503, Body: strings.Repeat("e", 512)}
		}
		return testserver.HTTPAnswer{Body: "ok"}
	})
	defer srv.Close()
	base := &http.Transport{MaxIdleConnsPerHost: 4}
	defer base.CloseIdleConnections()
	counting := &countingTransport{base: base}
	client := &http.Client{Transport: must(httpmw.New(counting, must(chain.New(noWait()))))}
	const requests = 10000
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			for i := range requests / 4 {
				resp, err := client.Get(fmt.Sprintf("%s/?w=%d&i=%d", srv.URL, w, i))
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d requests failed", failed.Load())
	}
	if o, c := counting.opened.Load(), counting.closed.Load(); o != 2*requests || c != o {
		t.Errorf("%d bodies handed out, %d closed; want %d, all closed", o, c, 2*requests)
	}
	// 4 workers over 4 idle connections need 4 to 7 here; net/http closes a
	// few more itself on a machine starved of CPU (up to 12 seen with 12
	// copies of this test on 2 cores). Undrained bodies cost one connection
	// per discarded response: thousands.
	if conns := srv.Connections.Load(); conns > 32 {
		t.Errorf("the server saw %d connections for %d requests: discarded bodies kept connections from reuse", conns, 2*requests)
	}
	t.Logf("%d requests, %d bodies closed, %d connections", 2*requests, counting.closed.Load(), srv.Connections.Load())
}

// TestCallerGivesUp: a wait past the caller's deadline, backoff or
// Retry-After, ends the retries at once, and the caller gets the last
// response; a cancellation during a wait ends it at once. In virtual time:
// the 503 comes back at exactly +0, and the cancellation's error at the
// instant of the cancellation.
func TestCallerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, client := newVirtual(t, always(503), must(chain.New(threeAttempts(retry.Constant(10*time.Second)))))
		// A deadline shorter than the next wait: returns at once with the 503.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		resp, err := client.Do(must(http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)))
		if err != nil || resp.StatusCode != 503 || time.Since(start) != 0 || srv.Received.Load() != 1 {
			t.Errorf("got %v, %v after %v and %d requests; want the 503 at once, after 1", resp, err, time.Since(start), srv.Received.Load())
		}
		if resp != nil {
			resp.Body.Close()
		}
		// A Retry-After longer than the deadline: the same.
		srv2, client2 := newVirtual(t, func(int64, *http.Request, []byte) testserver.HTTPAnswer {
			return testserver.HTTPAnswer{Status: 503, RetryAfter: "10"}
		}, must(chain.New(threeAttempts())))
		start = time.Now()
		resp, err = client2.Do(must(http.NewRequestWithContext(ctx, http.MethodGet, srv2.URL, nil)))
		if err != nil || resp.StatusCode != 503 || time.Since(start) != 0 || srv2.Received.Load() != 1 {
			t.Errorf("Retry-After past the deadline: %v, %v after %v; want the 503 at once", resp, err, time.Since(start))
		}
		if resp != nil {
			resp.Body.Close()
		}
		// Cancellation mid-wait (of 10 s), at 100 ms, returns at once.
		ctx2, cancel2 := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel2)
		start = time.Now()
		_, err = client.Do(must(http.NewRequestWithContext(ctx2, http.MethodGet, srv.URL, nil)))
		if took := time.Since(start); !errors.Is(err, context.Canceled) || took != 100*time.Millisecond || srv.Received.Load() != 2 {
			t.Errorf("got %v after %v; want context.Canceled at exactly 100ms, after 1 request", err, took)
		}
	})
}

// TestRetryAfter: Retry-After, in seconds or as an HTTP date, replaces the
// backoff wait: in virtual time, the retry comes exactly when the server
// said (a date in the past: at once, not after the 1 ms backoff).
func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value func(now time.Time) string
		wait  time.Duration
	}{
		{"seconds", func(time.Time) string { return "2" }, 2 * time.Second},
		// The bubble's clock starts on a whole second (midnight UTC,
		// 2000-01-01), so a date 3 s ahead, to the second, is 3 s ahead.
		{"date", func(now time.Time) string { return now.Add(3 * time.Second).UTC().Format(http.TimeFormat) }, 3 * time.Second},
		{"past date", func(now time.Time) string { return now.Add(-time.Hour).UTC().Format(http.TimeFormat) }, 0},
	} {
		inBubble(t, tc.name, func(t *testing.T) {
			var value string
			srv, client := newVirtual(t, func(n int64, _ *http.Request, _ []byte) testserver.HTTPAnswer {
				if n == 1 {
					value = tc.value(time.Now())
					return testserver.HTTPAnswer{Status: 503, RetryAfter: value}
				}
				return testserver.HTTPAnswer{}
			}, must(chain.New(threeAttempts())))
			start := time.Now()
			resp, err := get(t, client, srv.URL)
			took := time.Since(start)
			if err != nil || resp.StatusCode != 200 || took != tc.wait {
				t.Errorf("Retry-After %q: got %v, %v after %v; want 200 after exactly %v", value, resp, err, took, tc.wait)
			}
			if at := srv.Arrivals(); !slices.Equal(at, []time.Duration{0, tc.wait}) {
				t.Errorf("Retry-After %q: attempts at %v, want at 0 and %v", value, at, tc.wait)
			}
		})
	}
}

// TestRequestUntouched: the caller's request is not modified, and its body
// is closed even when the breaker rejects it before any attempt.
func TestRequestUntouched(t *testing.T) {
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
	srv, client, _ := newServer(t, always(503), must(chain.New(threeAttempts(), b, must(timeout.New(time.Second)))))
	req := must(http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("payload")))
	req.Header.Set("X-Test", "1")
	ctx := req.Context()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if req.Context() != ctx || len(req.Header) != 1 || req.Header.Get("X-Test") != "1" || req.URL.String() != srv.URL {
		t.Errorf("request modified: %+v", req)
	}
	closed := false
	body := &closeSpy{Reader: strings.NewReader("x"), closed: &closed}
	req2 := must(http.NewRequest(http.MethodPut, srv.URL, body))
	if _, err := client.Transport.RoundTrip(req2); !errors.Is(err, breaker.ErrOpen) || !closed {
		t.Errorf("got %v, body closed %t; want ErrOpen and the body closed", err, closed)
	}
}

type closeSpy struct {
	io.Reader
	closed *bool
}

func (c *closeSpy) Close() error { *c.closed = true; return nil }

// TestAttemptContextLivesUntilBodyClosed: with an attempt timeout, in the
// chain or in a chain nested in it, the body arrives after RoundTrip
// returned and is still readable; the attempt timeout still bounds the
// body. In virtual time: the late body is read whole at exactly +100 ms,
// and a body later than the 200 ms attempt timeout fails at exactly +200 ms.
// (TestLateBodyOnARealConnection checks the first on a real connection.)
func TestAttemptContextLivesUntilBodyClosed(t *testing.T) {
	for _, c := range []*chain.Chain{
		must(chain.New(must(timeout.New(5 * time.Second)))),
		must(chain.New(threeAttempts(), must(chain.New(must(timeout.New(5*time.Second)))))),
	} {
		inBubble(t, fmt.Sprint(c), func(t *testing.T) {
			srv, client := newVirtual(t, func(int64, *http.Request, []byte) testserver.HTTPAnswer {
				return testserver.HTTPAnswer{Body: "late body", BodyDelay: 100 * time.Millisecond}
			}, c)
			start := time.Now()
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took != 0 {
				t.Errorf("%v: the headers after %v, want at once", c, took)
			}
			body, err := io.ReadAll(resp.Body)
			took := time.Since(start)
			resp.Body.Close()
			if err != nil || string(body) != "late body" || took != 100*time.Millisecond {
				t.Errorf("%v: body %q, %v, after %v; want it whole, after exactly 100ms", c, body, err, took)
			}
		})
	}
	// And the attempt timeout still bounds the body.
	inBubble(t, "body past the attempt timeout", func(t *testing.T) {
		srv, client := newVirtual(t, func(int64, *http.Request, []byte) testserver.HTTPAnswer {
			return testserver.HTTPAnswer{Body: "too late", BodyDelay: time.Second}
		}, must(chain.New(must(timeout.New(200*time.Millisecond)))))
		start := time.Now()
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		took := time.Since(start)
		resp.Body.Close()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || took != 200*time.Millisecond {
			t.Errorf("a body slower than the attempt timeout: %v after %v; want the attempt's deadline at exactly 200ms", err, took)
		}
	})
}

// TestLateBodyOnARealConnection: over a real connection, a body the server
// sends only once RoundTrip has returned (and the test lets it) is read
// whole under an attempt timeout, in the chain or nested in it: net/http's
// body lives as long as the attempt context the transport keeps for it.
// Channels order the events; nothing is timed.
func TestLateBodyOnARealConnection(t *testing.T) {
	for _, c := range []*chain.Chain{
		must(chain.New(must(timeout.New(5 * time.Second)))),
		must(chain.New(noWait(), must(chain.New(must(timeout.New(5*time.Second)))))),
	} {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "9")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			select {
			case <-release:
				_, _ = io.WriteString(w, "late body")
			case <-r.Context().Done():
			}
		}))
		base := &http.Transport{}
		client := &http.Client{Transport: must(httpmw.New(base, c))}
		resp, err := client.Get(srv.URL)
		close(release) // the body, once RoundTrip has returned
		if err == nil {
			var body []byte
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && string(body) != "late body" {
				err = fmt.Errorf("body %q", body)
			}
		}
		base.CloseIdleConnections()
		srv.Close()
		if err != nil {
			t.Errorf("%v: %v; want the body whole", c, err)
		}
	}
}

func TestPerHostAndOnOpen(t *testing.T) {
	bad := testserver.NewHTTP(always(503))
	defer bad.Close()
	good := testserver.NewHTTP(always(200))
	defer good.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	breakers := map[string]*breaker.Breaker{}
	client := &http.Client{Transport: must(httpmw.New(base, nil,
		httpmw.PerHost(func(host string) (*chain.Chain, error) {
			b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
			breakers[host] = b
			return chain.New(b)
		}, 16),
		httpmw.OnOpen(func(req *http.Request, err error) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("stale")), Request: req}, nil
		})))}
	_, _ = get(t, client, bad.URL) // opens bad's breaker
	resp, err := client.Get(bad.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "stale" {
		t.Errorf("open breaker: body %q, want the fallback's", body)
	}
	if resp, err := get(t, client, good.URL); err != nil || resp.StatusCode != 200 {
		t.Errorf("other host: %v %v", resp, err)
	}
	if len(breakers) != 2 || bad.Received.Load() != 1 {
		t.Errorf("%d breakers, bad host received %d; want 2 and 1", len(breakers), bad.Received.Load())
	}
}

// TestCloseIdleConnections: http.Client.CloseIdleConnections reaches the
// base transport through the Transport: on a real connection, the request
// after it needs a new connection. (A body read to its end has put its
// connection back among the idle ones by the time the read returns.)
func TestCloseIdleConnections(t *testing.T) {
	srv, client, _ := newServer(t, always(200), must(chain.New(noWait())))
	if _, err := get(t, client, srv.URL); err != nil {
		t.Fatal(err)
	}
	client.CloseIdleConnections()
	if _, err := get(t, client, srv.URL); err != nil {
		t.Fatal(err)
	}
	if n := srv.Connections.Load(); n != 2 {
		t.Errorf("the server saw %d connections, want 2: the idle one closed, a new one for the second request", n)
	}
}

// recorder is a base RoundTripper that records the requests it is given.
type recorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	reqs []*http.Request
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.base.RoundTrip(req)
}

// TestEachAttemptGetsItsOwnRequest: without an attempt timeout the first
// attempt sends the caller's request itself, and every retry a copy of its
// own with a fresh body; with one, every attempt sends a copy carrying its
// own attempt context. The caller's request is never modified. In virtual
// time, the attempts come exactly 1 ms apart.
func TestEachAttemptGetsItsOwnRequest(t *testing.T) {
	for _, withTimeout := range []bool{false, true} {
		inBubble(t, fmt.Sprintf("timeout=%t", withTimeout), func(t *testing.T) {
			policies := []chain.Policy{threeAttempts()}
			if withTimeout {
				policies = append(policies, must(timeout.New(time.Second)))
			}
			srv := newMemServer(t, always(503))
			rec := &recorder{base: srv}
			client := &http.Client{Transport: must(httpmw.New(rec, must(chain.New(policies...))))}
			req := must(http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("payload")))
			req.Header.Set("X-Test", "1")
			body, ctx := req.Body, req.Context()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()

			if len(rec.reqs) != 3 {
				t.Fatalf("timeout %t: %d attempts, want 3", withTimeout, len(rec.reqs))
			}
			if at := srv.Arrivals(); !slices.Equal(at, []time.Duration{0, ms(1), ms(2)}) {
				t.Errorf("timeout %t: attempts at %v, want exactly 0, 1ms, 2ms", withTimeout, at)
			}
			if req.Body != body || req.Context() != ctx || len(req.Header) != 1 || req.URL.String() != srv.URL {
				t.Errorf("timeout %t: caller's request modified: %+v", withTimeout, req)
			}
			for i, r := range rec.reqs {
				_, hasDeadline := r.Context().Deadline()
				for _, prev := range rec.reqs[:i] {
					if r == prev || r.Body == prev.Body || (withTimeout && r.Context() == prev.Context()) {
						t.Errorf("timeout %t: attempt %d shares its request, body or context with an earlier one", withTimeout, i+1)
					}
				}
				switch {
				case i == 0 && !withTimeout && r != req:
					t.Errorf("attempt 1 without a timeout sent a copy, want the caller's request")
				case (i > 0 || withTimeout) && r == req:
					t.Errorf("timeout %t: attempt %d sent the caller's request, want a copy", withTimeout, i+1)
				case hasDeadline != withTimeout:
					t.Errorf("timeout %t: attempt %d has a deadline: %t", withTimeout, i+1, hasDeadline)
				case r.Header.Get("X-Test") != "1" || r.URL.String() != srv.URL || r.Method != http.MethodPut:
					t.Errorf("timeout %t: attempt %d is not the caller's request: %+v", withTimeout, i+1, r)
				}
			}
		})
	}
}

// TestFallbackResponds: a fallback in the chain answers a failed request
// with httpmw.Respond; one that returns nil without answering makes the
// request fail; Respond outside such a request is an error. In virtual
// time, the fallback answers after the last attempt, at exactly +2 ms.
func TestFallbackResponds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := must(fallback.New(func(ctx context.Context, err error) error {
			return httpmw.Respond(ctx, &http.Response{StatusCode: 200, Header: http.Header{"X-From": {"cache"}}, Body: io.NopCloser(strings.NewReader("stale"))})
		}, fallback.OnAnyFailure()))
		srv, client := newVirtual(t, always(503), must(chain.New(fb, threeAttempts())))
		resp, body, took := timedGet(t, client, srv.URL)
		if resp.StatusCode != 200 || string(body) != "stale" || resp.Header.Get("X-From") != "cache" || srv.Received.Load() != 3 || took != ms(2) {
			t.Errorf("got %d %q after %d requests and %v; want the fallback's 200 \"stale\" after 3, at exactly 2ms", resp.StatusCode, body, srv.Received.Load(), took)
		}
		silent := must(fallback.New(func(context.Context, error) error { return nil }, fallback.OnAnyFailure()))
		srv2, client2 := newVirtual(t, always(503), must(chain.New(silent)))
		if resp, err := client2.Get(srv2.URL); err == nil || !strings.Contains(err.Error(), "Respond") {
			if resp != nil {
				resp.Body.Close()
			}
			t.Errorf("a fallback that answers nothing: got %v, want an error pointing to Respond", err)
		}
	})
	if err := httpmw.Respond(context.Background(), &http.Response{}); err == nil {
		t.Error("Respond outside a request succeeded")
	}
}

// twoAtOnce is a user's own policy that runs two calls at once and returns the
// first result.
type twoAtOnce struct{}

func (twoAtOnce) Do(ctx context.Context, call func(context.Context) error) error {
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- call(ctx) }()
	}
	err := <-errs
	<-errs
	return err
}

// TestConcurrentAttempts: a policy that runs attempts at once (a hedge)
// sends both copies of a GET; the caller gets one response, the other is
// drained and closed (run with -race). A POST that is not idempotent is
// sent once: the second attempt is refused. In virtual time the first
// attempt is still in flight (the server takes 5 ms) when the second
// starts, every time.
func TestConcurrentAttempts(t *testing.T) {
	for range 10 {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			synctest.Test(t, func(t *testing.T) {
				srv, client := newVirtual(t, func(int64, *http.Request, []byte) testserver.HTTPAnswer {
					return testserver.HTTPAnswer{Body: "ok", Delay: 5 * time.Millisecond}
				}, must(chain.New(must(timeout.New(time.Second)), twoAtOnce{})))
				start := time.Now()
				req := must(http.NewRequest(method, srv.URL, nil))
				resp, err := client.Do(req)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("%s: got %v, %v; want one response", method, resp, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := int64(2)
				if method == http.MethodPost {
					want = 1
				}
				if n, took := srv.Received.Load(), time.Since(start); n != want || took != 5*time.Millisecond || string(body) != "ok" {
					t.Errorf("%s: the server received %d requests, the response %q came after %v; want %d, \"ok\" after exactly 5ms", method, n, body, took, want)
				}
			})
		}
	}
}

// timedGet gets url with client and reads the body to the end; it returns
// the response, its body and how long it all took.
func timedGet(t *testing.T, client *http.Client, url string) (*http.Response, []byte, time.Duration) {
	t.Helper()
	start := time.Now()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body, time.Since(start)
}
