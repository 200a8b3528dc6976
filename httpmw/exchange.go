package httpmw

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/adapter"
	"github.com/callguard/callguard/internal/attempt"
	"github.com/callguard/callguard/internal/deferred"
	"github.com/callguard/callguard/internal/hold"
	"github.com/callguard/callguard/internal/telemetry"
	"github.com/callguard/callguard/retry"
)

// exchange is one RoundTrip: its attempts, the last response, and, once
// returned, that response's body, which reports the breakers' deferred
// permits and releases the attempt's context when done with. One
// allocation serves all three. Which attempt won, and whether another may
// still be sent, is the call's to decide (internal/attempt): the exchange
// carries attempts out.
type exchange struct {
	// Context is the context the chain runs the request in: x itself is
	// that context, so that each attempt finds its exchange by Value (see
	// exchangeAttempt).
	context.Context
	t    *Transport
	req  *http.Request
	call attempt.Call
	// Guarded by call's lock (set in Commit and Do), read after call.Close.
	last *http.Response
	held *hold.Held // last's attempt context, if the chain made one

	mu     sync.Mutex     // guards answer
	answer *http.Response // a fallback's, from Respond

	body     io.ReadCloser // the returned response's body
	deferred deferred.Set  // the permits of the successful attempt (CountBodyErrors)
	settled  atomic.Bool   // the deferred permits are reported
	mayRetry bool
}

// errNoReplay refuses an attempt whose body is gone: a condition of the
// client's own making, neutral to the breakers and final.
var errNoReplay = breaker.Neutral(retry.Permanent(errors.New("httpmw: the request body was sent and cannot be replayed (no GetBody)")))

// attempt sends one copy of the request with the attempt's context.
// Attempts of a request that may be retried may run at once (a hedge):
// each sends its own copy of the body (GetBody); the first success is
// kept, any later answer drained and closed; the caller gets the last
// failure when none succeeds. Others run one at a time.
// selfKey is the key under which an exchange is its own context's value,
// for its attempts (Respond's exchangeKey is set only under a fallback).
type selfKey struct{}

// Value is the exchange for selfKey, the request's context's values else.
func (x *exchange) Value(key any) any {
	switch key {
	case selfKey{}:
		return x
	case attempt.Key{}:
		return &x.call
	}
	return x.Context.Value(key)
}

// exchangeAttempt makes one attempt of the exchange whose context actx
// descends from: a function, not a method value, which would allocate
// per request.
func exchangeAttempt(actx context.Context) error {
	return actx.Value(selfKey{}).(*exchange).attempt(actx)
}

func (x *exchange) attempt(actx context.Context) (err error) {
	if actx == context.Context(x) && !x.t.spreads {
		// No policy made the attempt a context of its own: it runs in
		// the request's, and the request is sent as it is. Over an
		// *Endpoints, it runs in the exchange, whose Value answers the
		// call's attempt.Call: the endpoints the earlier attempts tried.
		actx = x.Context
	}
	a, err := x.call.Begin(x.mayRetry)
	if err != nil {
		return err // refused before sending
	}
	defer a.Finish()
	if tr := x.t.cfg.tracing; tr != nil {
		var end func(error)
		actx, end = tr.Attempt(actx, x.req.URL.Host, telemetry.DefaultPort(x.req.URL.Scheme), a.N, a.Alone)
		defer func() { end(err) }()
	}
	if a.N > 1 && !replayable(x.req) {
		// Also against a policy that retries a Permanent error: the body
		// was sent and is gone.
		return errNoReplay
	}
	// The caller's request is never modified: an attempt that needs another
	// context or body sends a shallow copy, as net/http's own Client and
	// Transport do; the base must not modify it either (the RoundTripper
	// contract). A first attempt under the caller's context sends the
	// request itself.
	r := x.req
	if actx != r.Context() || a.N > 1 {
		r = r.WithContext(actx)
	}
	if a.N > 1 && x.req.GetBody != nil {
		b, err := x.req.GetBody()
		if err != nil {
			return breaker.Neutral(retry.Permanent(fmt.Errorf("httpmw: replaying the request body: %w", err)))
		}
		r.Body = b
	}

	var w *wire
	if c := x.t.conns; c != nil {
		// The base queues requests for a connection of its own: the
		// attempt's time on the downstream's side is the time making a
		// connection and with it (see conns). Every attempt is traced, so
		// that the others see the connection it holds; one with a
		// deadline is judged.
		dl, _ := actx.Deadline()
		w = new(wire)
		w.start(c, r, dl)
		r = r.WithContext(httptrace.WithClientTrace(actx, &w.trace)) // r's context is actx
	}
	resp, err := x.t.base.RoundTrip(r)
	cfg := x.t.cfg
	if w != nil {
		if err != nil {
			if _, ok := actx.Deadline(); ok {
				err = w.judge(err)
			}
			w.end()
		} else {
			w.keepUntilRead(resp)
		}
	}
	if err != nil {
		if cfg.failure(nil, err) {
			return permanentUnless(x.mayRetry, err)
		}
		return breaker.NotFailure(retry.Permanent(err))
	}
	if resp.Body == nil {
		resp.Body = http.NoBody // as net/http's Client reads a nil body from a RoundTripper
	}
	if resp.StatusCode == http.StatusSwitchingProtocols || !cfg.failure(resp, nil) {
		// A success (a protocol upgrade too, never retried): the first
		// wins; a later one is dropped.
		if !a.Commit(func() { x.keep(resp, hold.Hold(actx)) }) {
			drainClose(resp.Body, cfg.drainUpTo, cfg.drainTimeout)
			return attempt.ErrLost
		}
		return nil
	}
	// A failure that may be retried gives its connection back now, its
	// body read into memory (bounded): the next attempt, after a wait that
	// may outlast this attempt's context, needs no other connection.
	var held *hold.Held
	if resp.Body != http.NoBody && !(x.mayRetry && buffer(resp, cfg.drainUpTo, cfg.drainTimeout)) {
		held = hold.Hold(actx) // the caller may read it after RoundTrip
	}
	se := &StatusError{StatusCode: resp.StatusCode}
	if !a.Do(func() { x.keep(resp, held) }) {
		// Another attempt has won: the caller does not get this failure,
		// the breakers inside still count it; nothing retries it.
		held.Release()
		drainClose(resp.Body, cfg.drainUpTo, cfg.drainTimeout)
		return retry.Permanent(se)
	}
	if d, ok := adapter.RetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		return permanentUnless(x.mayRetry, retry.WithPushback(se, d))
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		// An overload refusal that does not say when to come back:
		// retried only with a Retry-After, as grpcmw retries a
		// ResourceExhausted only with a pushback. Retrying on the backoff
		// makes the overloaded downstream pay to refuse it again
		// (docs/protection.md: 1.97 downstream calls a request when its
		// capacity drops, 0.96 without, the same successes).
		return retry.Permanent(se)
	}
	return permanentUnless(x.mayRetry, se)
}

// keep makes resp, held the answer the caller gets (unless a later one
// replaces it), discarding the one kept before; under the call's lock.
func (x *exchange) keep(resp *http.Response, held *hold.Held) {
	x.discardLast()
	x.last, x.held = resp, held
}

// discardLast drains and closes the last response, and releases its
// context.
func (x *exchange) discardLast() {
	if x.last != nil {
		drainClose(x.last.Body, x.t.cfg.drainUpTo, x.t.cfg.drainTimeout)
		x.held.Release()
		x.last, x.held = nil, nil
	}
}

// discard drops what the exchange kept, once the call is over: the last
// response and the permits of a success.
func (x *exchange) discard() {
	x.discardLast()
	x.deferred.Done(nil)
}

// buffer reads a failing response's body into memory, up to upTo bytes
// for at most d, and closes it, so that its connection goes back to the
// pool at once; it reports whether the whole body was read. A body
// longer, or slower, is read on from where buffer stopped.
func buffer(resp *http.Response, upTo int64, d time.Duration) bool {
	if upTo <= 0 || d <= 0 || resp.ContentLength > upTo {
		return false
	}
	t := time.AfterFunc(d, func() { _ = resp.Body.Close() })
	var b bytes.Buffer
	_, err := io.CopyN(&b, resp.Body, upTo+1)
	stopped := t.Stop()
	if err != io.EOF || !stopped {
		// Longer than upTo, slower than d, or failed: the caller reads
		// what was read, then the rest.
		resp.Body = &prefixed{Reader: io.MultiReader(bytes.NewReader(b.Bytes()), resp.Body), Closer: resp.Body}
		return false
	}
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b.Bytes()))
	return true
}

// prefixed is a body whose first bytes were read already.
type prefixed struct {
	io.Reader
	io.Closer
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
