package httpmw_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/httpmw"
)

// The tests in this file run against an in-memory base RoundTripper, to
// reach edges a real server does not easily show.

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// closeCounter counts its Close calls.
type closeCounter struct {
	io.Reader
	closes atomic.Int32
}

func (b *closeCounter) Close() error { b.closes.Add(1); return nil }

func answer(status int, h http.Header, body string) (*http.Response, *closeCounter) {
	if h == nil {
		h = http.Header{}
	}
	b := &closeCounter{Reader: strings.NewReader(body)}
	return &http.Response{StatusCode: status, Header: h, Body: b}, b
}

// failThenOK answers 503 with header h once, then 200; it counts calls.
func failThenOK(h http.Header, calls *atomic.Int32) roundTripFunc {
	return func(*http.Request) (*http.Response, error) {
		if calls.Add(1) == 1 {
			resp, _ := answer(503, h, "")
			return resp, nil
		}
		resp, _ := answer(200, nil, "ok")
		return resp, nil
	}
}

// TestRetryAfterCenturies: a Retry-After too large for a time.Duration is a
// wait past any MaxPushback (it wrapped around to a fraction of a second):
// in virtual time, the 503 at +0, without a wait.
func TestRetryAfterCenturies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		tr := must(httpmw.New(failThenOK(http.Header{"Retry-After": {"18446744074"}}, &calls), must(chain.New(threeAttempts()))))
		start := time.Now()
		resp, err := tr.RoundTrip(must(http.NewRequest(http.MethodGet, "http://callguard.test/", nil)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if took := time.Since(start); calls.Load() != 1 || resp.StatusCode != 503 || took != 0 {
			t.Errorf("Retry-After of 584 years: %d attempts, status %d, after %v; want 1 attempt and the 503, at once", calls.Load(), resp.StatusCode, took)
		}
	})
}

// TestIdempotencyKeyAsNetHTTP: as net/http's replay rule, an Idempotency-Key
// header with a nil value (marked, not sent) and an X-Idempotency-Key make a
// POST retryable. In virtual time, the retry comes after exactly its 1 ms
// backoff; a plain POST's 503 at once.
func TestIdempotencyKeyAsNetHTTP(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.Header
	}{{"Idempotency-Key nil", http.Header{"Idempotency-Key": nil}}, {"X-Idempotency-Key", http.Header{"X-Idempotency-Key": {"k"}}}, {"none", http.Header{}}} {
		h := tc.h
		inBubble(t, tc.name, func(t *testing.T) {
			var calls atomic.Int32
			tr := must(httpmw.New(failThenOK(nil, &calls), must(chain.New(threeAttempts()))))
			req := must(http.NewRequest(http.MethodPost, "http://callguard.test/", strings.NewReader("b")))
			req.Header = h
			start := time.Now()
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			resp.Body.Close()
			want, wantTook := int32(2), time.Millisecond
			if len(h) == 0 {
				want, wantTook = 1, 0 // a plain POST is not retried
			}
			if calls.Load() != want || took != wantTook {
				t.Errorf("%v: %d attempts, after %v; want %d, after exactly %v", h, calls.Load(), took, want, wantTook)
			}
		})
	}
}

// lateCaller is a careless policy of the user's: it calls again after its
// Do has returned (20 ms later), and keeps that call's error in late.
type lateCaller struct {
	wg   *sync.WaitGroup
	late *error
}

func (p lateCaller) Do(ctx context.Context, call func(context.Context) error) error {
	err := call(ctx)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		time.Sleep(20 * time.Millisecond) // virtual, in the test's bubble
		*p.late = call(context.WithoutCancel(ctx))
	}()
	return err
}

// TestLateAttemptRefused: an attempt after RoundTrip has returned sends
// nothing, fails, and leaves the caller's response alone. In virtual time.
func TestLateAttemptRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wg sync.WaitGroup
		var late error
		var calls atomic.Int32
		base := roundTripFunc(func(*http.Request) (*http.Response, error) {
			calls.Add(1)
			resp, _ := answer(200, nil, "hello")
			return resp, nil
		})
		tr := must(httpmw.New(base, must(chain.New(lateCaller{&wg, &late}))))
		resp, err := tr.RoundTrip(must(http.NewRequest(http.MethodGet, "http://callguard.test/", nil)))
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "hello" || calls.Load() != 1 || late == nil {
			t.Errorf("body %q after %d requests, the late attempt's error %v; want the caller's \"hello\", no late request, and an error", body, calls.Load(), late)
		}
	})
}

// TestGetBodyFailureKeepsLastResponse: when a retry cannot replay the body,
// the caller gets the last failing response, whose body is open. In virtual
// time: GetBody is called for the retry, after exactly its 1 ms backoff.
func TestGetBodyFailureKeepsLastResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		var first *closeCounter
		base := roundTripFunc(func(*http.Request) (*http.Response, error) {
			calls.Add(1)
			resp, b := answer(503, nil, "busy")
			first = b
			return resp, nil
		})
		tr := must(httpmw.New(base, must(chain.New(threeAttempts()))))
		req := must(http.NewRequest(http.MethodPut, "http://callguard.test/", strings.NewReader("b")))
		start := time.Now()
		var replayAt time.Duration = -1
		req.GetBody = func() (io.ReadCloser, error) {
			replayAt = time.Since(start)
			return nil, errors.New("gone")
		}
		resp, err := tr.RoundTrip(req)
		if err != nil || resp.StatusCode != 503 {
			t.Fatalf("got %v, %v; want the 503", resp, err)
		}
		took := time.Since(start)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "busy" || calls.Load() != 1 || first.closes.Load() != 1 {
			t.Errorf("body %q after %d requests, closed %d times; want \"busy\" from 1, closed once", body, calls.Load(), first.closes.Load())
		}
		if replayAt != time.Millisecond || took != time.Millisecond {
			t.Errorf("GetBody called at %v, the 503 after %v; want both at exactly 1ms", replayAt, took)
		}
	})
}

// TestInvalidOptionsNamed: an invalid option fails every request with an
// error naming it, and the request body is closed.
func TestInvalidOptionsNamed(t *testing.T) {
	build := func(string) (*chain.Chain, error) { return chain.New(threeAttempts()) }
	c := must(chain.New(threeAttempts()))
	for name, o := range map[string]httpmw.Option{
		"PerHost":   httpmw.PerHost(build, 0),
		"PerKey":    httpmw.PerKey(nil, build, 5),
		"FailureIf": httpmw.FailureIf(nil),
		"DrainUpTo": httpmw.DrainUpTo(-1),
		"nil":       nil,
	} {
		var calls atomic.Int32
		tr, err := httpmw.New(failThenOK(nil, &calls), c, o)
		if tr != nil || err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: New = %v, %v; want an error naming it", name, tr, err)
		}
	}
}

// twice is a careless policy of the user's: it calls again whatever the
// first call returned.
type twice struct{}

func (twice) Do(ctx context.Context, call func(context.Context) error) error {
	_ = call(ctx)
	return call(ctx)
}

// TestBodyNotReplayedTwice: a body without GetBody is sent once, even under
// a policy that calls again: the second attempt is refused, and the caller
// gets the first response.
func TestBodyNotReplayedTwice(t *testing.T) {
	var calls atomic.Int32
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		resp, _ := answer(503, nil, "busy")
		return resp, nil
	})
	tr := must(httpmw.New(base, must(chain.New(twice{})), httpmw.RetryAll()))
	req := must(http.NewRequest(http.MethodPost, "http://callguard.test/", io.NopCloser(strings.NewReader("once"))))
	resp, err := tr.RoundTrip(req)
	if err != nil || resp.StatusCode != 503 || calls.Load() != 1 {
		t.Fatalf("got %v, %v after %d requests; want the 503 from 1", resp, err, calls.Load())
	}
	resp.Body.Close()
}
