package httpmw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/adapter"
	"github.com/callguard/callguard/internal/deferred"
	"github.com/callguard/callguard/internal/hold"
	"github.com/callguard/callguard/retry"
)

// exchange is one RoundTrip: its attempts, the last response, and, once
// returned, that response's body, which reports the breakers' deferred
// permits and releases the attempt's context when done with. One
// allocation serves all three.
type exchange struct {
	t        *Transport
	req      *http.Request
	last     *http.Response
	held     *hold.Held     // last's attempt context, if the chain made one
	answer   *http.Response // a fallback's, from Respond
	body     io.ReadCloser  // the returned response's body
	deferred deferred.Set   // the permits of the successful attempt (CountBodyErrors)
	attempts int
	mu       sync.Mutex  // guards the fields above and below
	settled  atomic.Bool // the deferred permits are reported
	mayRetry bool
	over     bool // RoundTrip has its result: no more attempts
	won      bool // an attempt succeeded: later answers are dropped
	inflight int  // attempts sending now
}

// The conditions of the client's own making: neutral to the breakers (they
// say nothing of the server's health) and final.
var (
	errConcurrent = breaker.Neutral(retry.Permanent(refusal("httpmw: an attempt at once with another of a request that cannot be retried, after another succeeded, or after RoundTrip returned")))
	errNoReplay   = breaker.Neutral(retry.Permanent(errors.New("httpmw: the request body was sent and cannot be replayed (no GetBody)")))
)

// attempt sends one copy of the request with the attempt's context.
// Attempts of a request that may be retried may run at once (a hedge):
// each sends its own copy of the body (GetBody); the first success is
// kept, a later one drained and closed; the caller gets the last failure
// when none succeeds. Others run one at a time.
func (x *exchange) attempt(actx context.Context) error {
	x.mu.Lock()
	if x.over {
		x.mu.Unlock()
		return errConcurrent // a late call, after RoundTrip has returned
	}
	concurrent := x.inflight > 0
	if concurrent && !x.mayRetry {
		x.mu.Unlock()
		return errConcurrent
	}
	if x.attempts > 0 && !replayable(x.req) {
		// Also against a policy that retries a Permanent error: the body
		// was sent and is gone.
		x.mu.Unlock()
		return errNoReplay
	}
	var body io.ReadCloser
	if x.attempts > 0 && x.req.GetBody != nil {
		// Before discarding the last response: if the body cannot be
		// replayed, the caller gets that response.
		b, err := x.req.GetBody()
		if err != nil {
			x.mu.Unlock()
			return breaker.Neutral(retry.Permanent(fmt.Errorf("httpmw: replaying the request body: %w", err)))
		}
		body = b
	}
	x.attempts++
	if !concurrent {
		x.discard()
	}
	x.inflight++
	// The caller's request is never modified: an attempt that needs another
	// context or body sends a shallow copy, as net/http's own Client and
	// Transport do; the base must not modify it either (the RoundTripper
	// contract). A first attempt under the caller's context sends the
	// request itself.
	r := x.req
	if actx != r.Context() || x.attempts > 1 {
		r = r.WithContext(actx)
	}
	if body != nil {
		r.Body = body
	}
	x.mu.Unlock()

	resp, err := x.t.base.RoundTrip(r)
	cfg := x.t.cfg
	if err == nil && resp.Body == nil {
		resp.Body = http.NoBody // as net/http's Client reads a nil body from a RoundTripper
	}
	x.mu.Lock()
	x.inflight--
	if err == nil && (x.over || x.won) {
		// RoundTrip has its answer already (another attempt's, or none):
		// this one is dropped, neutral to the breakers.
		x.mu.Unlock()
		drainClose(resp.Body, cfg.drainUpTo, cfg.drainTimeout)
		return errConcurrent
	}
	defer x.mu.Unlock()
	if err != nil {
		if cfg.failure(nil, err) {
			return permanentUnless(x.mayRetry, err)
		}
		return breaker.NotFailure(retry.Permanent(err))
	}
	x.discard() // an earlier answer (a hedge's failure, say): the latest is kept
	x.last, x.held = resp, hold.Hold(actx)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		x.won = true
		return nil // a protocol upgrade: a success, never retried
	}
	if !cfg.failure(resp, nil) {
		x.won = true
		return nil
	}
	se := &StatusError{StatusCode: resp.StatusCode}
	if d, ok := adapter.RetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		return permanentUnless(x.mayRetry, retry.WithPushback(se, d))
	}
	return permanentUnless(x.mayRetry, se)
}

// discard drains and closes the last response, and releases its context.
func (x *exchange) discard() {
	if x.last != nil {
		drainClose(x.last.Body, x.t.cfg.drainUpTo, x.t.cfg.drainTimeout)
		x.held.Release()
		x.last, x.held = nil, nil
	}
	x.deferred.Done(nil)
}

// Read, Close and Write (for a body that is a connection) make the
// exchange the returned response's body.
func (x *exchange) Read(p []byte) (int, error) {
	n, err := x.body.Read(p)
	if err != nil {
		x.settle(err)
	}
	return n, err
}

// Close closes the body, reports the deferred permits (a success, unless a
// read failed) and releases the attempt's context.
func (x *exchange) Close() error {
	x.settle(nil)
	err := x.body.Close()
	x.held.Release() // a Held may be released more than once
	return err
}

// settle reports the outcome of the body to the deferred permits, once: a
// read error is a failure (as FailureIf classifies it), the end of the
// body or a Close a success.
func (x *exchange) settle(err error) {
	if !x.settled.CompareAndSwap(false, true) {
		return
	}
	if err == io.EOF || err != nil && !x.t.cfg.failure(nil, err) {
		err = nil
	}
	x.deferred.Done(err)
}

func permanentUnless(mayRetry bool, err error) error {
	if mayRetry {
		return err
	}
	return retry.Permanent(err)
}

func idempotentMethod(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true // "" is GET
	}
	return false
}

// replayable reports whether req can be sent again: no body, or GetBody.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

func (t *Transport) retryable(req *http.Request) bool {
	if !replayable(req) {
		return false // the body cannot be replayed
	}
	if t.cfg.retryAll {
		return true
	}
	// As net/http's own replay rule: the header present, even with a nil
	// value (net/http's way of marking a request idempotent without sending
	// the header), under its canonical key as Header.Set stores it.
	if _, ok := req.Header["Idempotency-Key"]; ok {
		return true
	}
	if _, ok := req.Header["X-Idempotency-Key"]; ok {
		return true
	}
	return idempotentMethod(req.Method)
}

// drainClose reads up to upTo bytes of a discarded body, for at most d,
// and closes it: a body that stalls is closed early (its connection is
// then not reused), so that it cannot delay the next attempt.
func drainClose(body io.ReadCloser, upTo int64, d time.Duration) {
	if d > 0 && upTo > 0 {
		t := time.AfterFunc(d, func() { _ = body.Close() }) // unblocks the read below
		_, _ = io.CopyN(io.Discard, body, upTo)
		t.Stop()
	}
	_ = body.Close()
}

// refusal is an attempt the exchange refused before sending it: a local
// refusal (callguard.ErrRejected), which a hedge sets aside.
type refusal string

func (r refusal) Error() string      { return string(r) }
func (refusal) Is(target error) bool { return target == callguard.ErrRejected }
