package httpmw_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

func get0(t *testing.T, tr http.RoundTripper, ctx context.Context) (*http.Response, error) {
	t.Helper()
	return tr.RoundTrip(must(http.NewRequestWithContext(ctx, http.MethodGet, "http://callguard.test/", nil)))
}

// TestNilResponseBody: a base RoundTripper may return a nil body (net/http's
// Client reads it as empty): no panic reading it, or discarding a nil-body
// 503 before a retry, which comes after exactly its 1 ms backoff (virtual
// time).
func TestNilResponseBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		base := roundTripFunc(func(*http.Request) (*http.Response, error) {
			if calls.Add(1) == 1 {
				return &http.Response{StatusCode: 503, Header: http.Header{}}, nil
			}
			return &http.Response{StatusCode: 200, Header: http.Header{}}, nil
		})
		tr := must(httpmw.New(base, must(chain.New(threeAttempts()))))
		start := time.Now()
		resp, err := get0(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		body, err := io.ReadAll(resp.Body)
		if cerr := resp.Body.Close(); err != nil || cerr != nil || len(body) != 0 || resp.StatusCode != 200 || calls.Load() != 2 || took != time.Millisecond {
			t.Errorf("got %d %q (%v, %v) after %d calls and %v; want an empty 200 after 2, at exactly 1ms", resp.StatusCode, body, err, cerr, calls.Load(), took)
		}
	})
}

// upgradeBody is a 101 response's body: the connection, readable and
// writable.
type upgradeBody struct{ io.ReadWriteCloser }

// TestSwitchingProtocols: a 101 response passes through unchanged, its body
// still an io.ReadWriteCloser, never retried, and, over a real server, the
// upgraded connection works after the attempt timeout: the attempt's
// context has ended by the time RoundTrip returns (no need to wait out the
// timeout to see the connection outlive it).
func TestSwitchingProtocols(t *testing.T) {
	want := &upgradeBody{}
	var calls atomic.Int32
	base := roundTripFunc(func(*http.Request) (*http.Response, error) {
		calls.Add(1)
		return &http.Response{StatusCode: 101, Header: http.Header{"Upgrade": {"echo"}}, Body: want}, nil
	})
	c := must(chain.New(threeAttempts(), must(breaker.New(breaker.Settings{ConsecutiveFailures: 1})), must(timeout.New(time.Second))))
	resp, err := get0(t, must(httpmw.New(base, c, httpmw.FailureIf(func(*http.Response, error) bool { return true }))), context.Background())
	if err != nil || resp.Body != io.ReadCloser(want) || calls.Load() != 1 {
		t.Fatalf("got %v, body %T, after %d calls; want the base's body unchanged after 1", err, resp.Body, calls.Load())
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "echo")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		line, err := brw.ReadString('\n')
		if err == nil {
			_, _ = brw.WriteString("echo " + line)
			_ = brw.Flush()
		}
	}))
	defer srv.Close()
	base2 := &http.Transport{}
	defer base2.CloseIdleConnections()
	rec := &recorder{base: base2}
	tr := must(httpmw.New(rec, must(chain.New(threeAttempts(), must(timeout.New(time.Second))))))
	req := must(http.NewRequest(http.MethodGet, srv.URL, nil))
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err = tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		t.Fatalf("101 body %T, want an io.ReadWriteCloser", resp.Body)
	}
	defer rwc.Close()
	if len(rec.reqs) != 1 || rec.reqs[0].Context().Err() == nil {
		t.Fatalf("%d attempts, the attempt's context not ended; want 1, ended when RoundTrip returned", len(rec.reqs))
	}
	if _, err := io.WriteString(rwc, "hi\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(rwc).ReadString('\n'); err != nil || line != "echo hi\n" {
		t.Errorf("read %q, %v; want %q", line, err, "echo hi\n")
	}
}

// retryAnyway is a user's policy that calls again whatever the first call
// returned: it meets the client's own conditions.
type retryAnyway struct{}

func (retryAnyway) Do(ctx context.Context, call func(context.Context) error) error {
	_ = call(ctx)
	return call(ctx)
}

// TestClientConditionsNeutral: what the client causes itself (a body that
// cannot be replayed, a failing GetBody, a second attempt at once) is
// neutral to the breakers: not a failure, and not a success that could
// close a half-open breaker. In virtual time, the hedge's second attempt
// always starts while the first is in the base.
func TestClientConditionsNeutral(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  func() *http.Request
		pol  chain.Policy
	}{
		{"no replay", func() *http.Request {
			return must(http.NewRequest(http.MethodPost, "http://callguard.test/", io.NopCloser(strings.NewReader("x"))))
		}, retryAnyway{}},
		{"GetBody fails", func() *http.Request {
			r := must(http.NewRequest(http.MethodPut, "http://callguard.test/", strings.NewReader("x")))
			r.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
			return r
		}, retryAnyway{}},
		{"concurrent attempts of a request not idempotent", func() *http.Request {
			return must(http.NewRequest(http.MethodPost, "http://callguard.test/", nil))
		}, twoAtOnce{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 5}))
				base := roundTripFunc(func(*http.Request) (*http.Response, error) {
					time.Sleep(time.Millisecond) // virtual: a hedge's second attempt meets the first
					resp, _ := answer(503, nil, "")
					return resp, nil
				})
				tr := must(httpmw.New(base, must(chain.New(tc.pol, b))))
				resp, err := tr.RoundTrip(tc.req())
				if err == nil {
					resp.Body.Close()
				}
				if cn := b.Counts(); cn.Neutral != 1 || cn.Successes != 0 || cn.Failures != 1 {
					t.Errorf("breaker %+v; want 1 failure (the 503) and 1 neutral call", cn)
				}
			})
		})
	}
}

// TestRetryAfterBeyondInt64: a Retry-After of more digits than an int64
// holds is a wait longer than allowed: no retry (it was read as no header,
// and retried at once), and no wait: in virtual time, the 503 at +0.
func TestRetryAfterBeyondInt64(t *testing.T) {
	for _, v := range []string{"99999999999999999999", "9223372036854775807", "18446744073709551616"} {
		inBubble(t, v, func(t *testing.T) {
			var calls atomic.Int32
			tr := must(httpmw.New(failThenOK(http.Header{"Retry-After": {v}}, &calls), must(chain.New(threeAttempts()))))
			start := time.Now()
			resp, err := get0(t, tr, context.Background())
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if took := time.Since(start); resp.StatusCode != 503 || calls.Load() != 1 || took != 0 {
				t.Errorf("Retry-After %s: got %d after %d calls and %v; want the 503 after 1, at once", v, resp.StatusCode, calls.Load(), took)
			}
		})
	}
}

// TestTrippingRequestGivesUp: the request whose failure opens the breaker
// does not wait out its Retry-After only to be rejected: it gives up at once
// with the last response, marked; with RetryWhenOpen each wait lasts until
// the breaker admits again.
func TestTrippingRequestGivesUp(t *testing.T) {
	for _, whenOpen := range []bool{false, true} {
		inBubble(t, fmt.Sprintf("RetryWhenOpen=%t", whenOpen), func(t *testing.T) {
			var calls atomic.Int32
			base := roundTripFunc(func(*http.Request) (*http.Response, error) {
				calls.Add(1)
				resp, _ := answer(503, http.Header{"Retry-After": {"1"}}, "")
				return resp, nil
			})
			opts := []retry.Option{retry.MaxAttempts(3)}
			if whenOpen {
				opts = append(opts, retry.RetryWhenOpen())
			}
			b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: 10 * time.Second}))
			tr := must(httpmw.New(base, must(chain.New(must(retry.New(opts...)), b))))
			start := time.Now()
			resp, err := get0(t, tr, context.Background())
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			wantTook, wantCalls, wantMark := time.Duration(0), int32(1), "open"
			if whenOpen {
				// Each wait lasts until the breaker admits again, just past
				// its 10 s stay; each half-open probe fails and opens it
				// again; the attempts, not the breaker, end the retries.
				wantTook, wantCalls, wantMark = 2*(10*time.Second+1), 3, ""
			}
			if took != wantTook || calls.Load() != wantCalls || resp.StatusCode != 503 || resp.Header.Get(httpmw.BreakerHeader) != wantMark {
				t.Errorf("RetryWhenOpen=%t: %d (%s: %q) after %v and %d calls; want the 503 (%q) after %v and %d",
					whenOpen, resp.StatusCode, httpmw.BreakerHeader, resp.Header.Get(httpmw.BreakerHeader), took, calls.Load(), wantMark, wantTook, wantCalls)
			}
		})
	}
}

// failingBody returns some bytes, then err.
type failingBody struct {
	data string
	err  error
}

func (b *failingBody) Read(p []byte) (int, error) {
	if b.data == "" {
		return 0, b.err
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}
func (*failingBody) Close() error { return nil }

// TestBodyErrorsCount: a response body that fails mid-read is a failure of
// the downstream (it was a success when the headers arrived); a half-open
// probe keeps its slot until its body is done with. CountBodyErrors(false)
// counts the response when its headers arrive.
func TestBodyErrorsCount(t *testing.T) {
	for _, judge := range []bool{true, false} {
		inBubble(t, fmt.Sprintf("CountBodyErrors=%t", judge), func(t *testing.T) {
			base := roundTripFunc(func(*http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: 200, Header: http.Header{}, Body: &failingBody{data: "partial", err: errors.New("connection reset")}}, nil
			})
			b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 2, OpenTimeout: time.Second, HalfOpenProbes: 1}))
			tr := must(httpmw.New(base, must(chain.New(b)), httpmw.CountBodyErrors(judge)))
			for range 2 {
				resp, err := get0(t, tr, context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadAll(resp.Body); err == nil {
					t.Fatal("read the failing body without an error")
				}
				resp.Body.Close()
			}
			want := breaker.StateOpen
			if !judge {
				want = breaker.StateClosed
			}
			if b.State() != want {
				t.Fatalf("CountBodyErrors(%t): breaker %v %+v, want %v", judge, b.State(), b.Counts(), want)
			}
			if !judge {
				return
			}
			time.Sleep(2 * time.Second) // virtual: past the open stay, half-open
			tr2 := must(httpmw.New(roundTripFunc(func(*http.Request) (*http.Response, error) {
				resp, _ := answer(200, nil, "fine")
				return resp, nil
			}), must(chain.New(b))))
			probe, err := get0(t, tr2, context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := get0(t, tr2, context.Background()); !errors.Is(err, breaker.ErrTooManyProbes) {
				t.Errorf("while the probe's body is open: %v, want ErrTooManyProbes", err)
			}
			_, _ = io.ReadAll(probe.Body)
			probe.Body.Close()
			if b.State() != breaker.StateClosed {
				t.Errorf("after the probe's body: breaker %v, want closed", b.State())
			}
		})
	}
}

// stallingBody blocks every Read until it is closed.
type stallingBody struct {
	closed chan struct{}
	once   atomic.Bool
}

func (b *stallingBody) Read([]byte) (int, error) {
	<-b.closed
	return 0, errors.New("closed")
}

func (b *stallingBody) Close() error {
	if b.once.CompareAndSwap(false, true) {
		close(b.closed)
	}
	return nil
}

// TestDrainBounded: a 503 whose body stalls delays the next attempt by the
// drain timeout only (it waited for the body until the caller's deadline,
// or forever).
func TestDrainBounded(t *testing.T) {
	for _, d := range []time.Duration{httpmw.DefaultDrainTimeout, 5 * time.Millisecond} {
		inBubble(t, d.String(), func(t *testing.T) {
			var calls atomic.Int32
			base := roundTripFunc(func(*http.Request) (*http.Response, error) {
				if calls.Add(1) == 1 {
					return &http.Response{StatusCode: 503, Header: http.Header{}, Body: &stallingBody{closed: make(chan struct{})}}, nil
				}
				resp, _ := answer(200, nil, "ok")
				return resp, nil
			})
			opts := []httpmw.Option{}
			if d != httpmw.DefaultDrainTimeout {
				opts = append(opts, httpmw.DrainTimeout(d))
			}
			tr := must(httpmw.New(base, must(chain.New(must(retry.New(retry.MaxAttempts(2), retry.Constant(0))))), opts...))
			start := time.Now()
			resp, err := get0(t, tr, context.Background())
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if took := time.Since(start); took != d || resp.StatusCode != 200 {
				t.Errorf("got %d after %v; want the 200 after the %v drain bound", resp.StatusCode, took, d)
			}
		})
	}
}

// hangingBase answers after lat, or hangs until the request's context ends
// when lat < 0.
func hangingBase(lat time.Duration) roundTripFunc {
	return func(r *http.Request) (*http.Response, error) {
		if lat >= 0 {
			t := time.NewTimer(lat)
			defer t.Stop()
			select {
			case <-t.C:
				resp, _ := answer(200, nil, "ok")
				return resp, nil
			case <-r.Context().Done():
			}
		} else {
			<-r.Context().Done()
		}
		return nil, r.Context().Err()
	}
}

// TestImpatientCallers: with http.Client.Timeout (80 ms) below the attempt
// timeout (100 ms), a hung server still opens the breaker; a healthy one
// (10 ms) never does.
func TestImpatientCallers(t *testing.T) {
	for _, tc := range []struct {
		lat  time.Duration
		want breaker.State
	}{{-1, breaker.StateOpen}, {10 * time.Millisecond, breaker.StateClosed}} {
		name := "server hangs"
		if tc.lat >= 0 {
			name = "server latency " + tc.lat.String()
		}
		inBubble(t, name, func(t *testing.T) {
			b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: time.Minute}))
			c := must(chain.New(threeAttempts(), b, must(timeout.New(100*time.Millisecond))))
			client := &http.Client{Timeout: 80 * time.Millisecond, Transport: must(httpmw.New(hangingBase(tc.lat), c))}
			for range 6 {
				if resp, err := client.Get("http://callguard.test/"); err == nil {
					resp.Body.Close()
				}
			}
			if b.State() != tc.want {
				t.Errorf("server latency %v: breaker %v %+v, want %v", tc.lat, b.State(), b.Counts(), tc.want)
			}
		})
	}
}

// TestKeyedStateChanges: OnStateChange receives each breaker's changes with
// the key of its chain; Breakers lists the keyed breakers.
func TestKeyedStateChanges(t *testing.T) {
	var got []breaker.StateChange
	tr := must(httpmw.New(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		status := 200
		if r.URL.Host == "down.test" {
			status = 503
		}
		resp, _ := answer(status, nil, "")
		return resp, nil
	}), nil, httpmw.PerHost(func(host string) (*chain.Chain, error) {
		b, err := breaker.New(breaker.Settings{Name: "per-host", ConsecutiveFailures: 1})
		if err != nil {
			return nil, err
		}
		return chain.New(b)
	}, 10), httpmw.OnStateChange(func(c breaker.StateChange) { got = append(got, c) })))
	for _, host := range []string{"up.test", "down.test"} {
		resp, err := tr.RoundTrip(must(http.NewRequest(http.MethodGet, "http://"+host+"/", nil)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if len(got) != 1 || got[0].Key != "down.test" || got[0].Name != "per-host" || got[0].From != breaker.StateClosed || got[0].To != breaker.StateOpen {
		t.Errorf("state changes %+v; want down.test closed → open", got)
	}
	list := tr.Breakers()
	keys := []string{}
	for _, s := range list {
		keys = append(keys, s.Key+":"+s.State.String())
	}
	if !slices.Equal(keys, []string{"down.test:open", "up.test:closed"}) {
		t.Errorf("Breakers() = %v; want down.test open, up.test closed", keys)
	}
}

// TestInvalidOptionsAtConstruction: New reports an invalid option once, by
// name.
func TestInvalidOptionsAtConstruction(t *testing.T) {
	c := must(chain.New(threeAttempts()))
	for _, tc := range []struct {
		opt  httpmw.Option
		name string
	}{
		{httpmw.PerHost(nil, 1), "PerHost"},
		{httpmw.PerKey(nil, func(string) (*chain.Chain, error) { return nil, nil }, 1), "PerKey"},
		{httpmw.DrainUpTo(-1), "DrainUpTo"},
		{httpmw.DrainTimeout(-1), "DrainTimeout"},
		{httpmw.FailureIf(nil), "FailureIf"},
		{httpmw.OnStateChange(nil), "OnStateChange"},
		{httpmw.Client(""), "Client"},
		{httpmw.Tracing(nil), "Tracing"},
	} {
		if _, err := httpmw.New(nil, c, tc.opt); err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("New with an invalid %s: %v, want an error naming it", tc.name, err)
		}
	}
}

// TestZeroTransport: a zero Transport fails every request with an error
// that says so, and closes the request's body, instead of panicking.
func TestZeroTransport(t *testing.T) {
	var tr httpmw.Transport
	body := &closeCounter{Reader: strings.NewReader("b")}
	req := must(http.NewRequest(http.MethodPut, "http://callguard.test/", body))
	if resp, err := tr.RoundTrip(req); resp != nil || err == nil || !strings.Contains(err.Error(), "httpmw.New") || body.closes.Load() != 1 {
		t.Errorf("RoundTrip = %v, %v, body closed %d times; want an error pointing to httpmw.New, the body closed once", resp, err, body.closes.Load())
	}
	if tr.Breakers() != nil {
		t.Errorf("Breakers() = %v, want none", tr.Breakers())
	}
	tr.CloseIdleConnections()
	var nilTr *httpmw.Transport
	if nilTr.Breakers() != nil || nilTr.Keys() != (httpmw.KeyStats{}) {
		t.Error("a nil *Transport reports breakers or keys")
	}
	nilTr.CloseIdleConnections()
	if _, err := nilTr.RoundTrip(must(http.NewRequest(http.MethodGet, "http://callguard.test/", nil))); err == nil {
		t.Error("a nil *Transport's RoundTrip succeeded")
	}
}
