package httpmw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/internal/keyed"
	"github.com/callguard/callguard/retry"
)

// Option configures a transport.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	retryAll  bool
	failure   func(*http.Response, error) bool
	onOpen    func(*http.Request, error) (*http.Response, error)
	keyOf     func(*http.Request) string
	build     func(string) (*chain.Chain, error)
	maxKeys   int
	source    keyed.Source
	drainUpTo int64
	err       error
}

// RetryAll lets non-idempotent requests (POST, PATCH, … without an
// Idempotency-Key) be retried too.
func RetryAll() Option { return optionFunc(func(c *config) { c.retryAll = true }) }

// FailureIf replaces the default classification (transport errors, 5xx and
// 429 are failures). It is called with the response or the transport error.
func FailureIf(fn func(resp *http.Response, err error) bool) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			c.err = errors.New("httpmw: FailureIf(nil)")
		}
		c.failure = fn
	})
}

// OnOpen answers a request that the breaker rejects before any attempt
// reached the server, for example from a stale cache. Its result is
// RoundTrip's result. The request's body has been closed by then.
func OnOpen(fn func(req *http.Request, err error) (*http.Response, error)) Option {
	return optionFunc(func(c *config) { c.onOpen = fn })
}

// PerHost keeps a chain, with its own breaker state, per request host
// (req.URL.Host): build makes a host's chain on its first request; at most
// maxHosts are kept, the least recently used dropped first. The chain given
// to NewTransport is then unused and may be nil.
func PerHost(build func(host string) (*chain.Chain, error), maxHosts int) Option {
	return perKey("PerHost", func(r *http.Request) string { return r.URL.Host }, build, maxHosts)
}

// PerKey keeps a chain per key computed from the request.
func PerKey(key func(*http.Request) string, build func(key string) (*chain.Chain, error), maxKeys int) Option {
	return perKey("PerKey", key, build, maxKeys)
}

func perKey(name string, key func(*http.Request) string, build func(key string) (*chain.Chain, error), maxKeys int) Option {
	return optionFunc(func(c *config) {
		switch {
		case key == nil:
			c.err = fmt.Errorf("httpmw: %s needs a key function", name)
		case build == nil:
			c.err = fmt.Errorf("httpmw: %s needs a function that builds a chain", name)
		case maxKeys < 1:
			c.err = fmt.Errorf("httpmw: %s(…, %d): the maximum number of keys must be >= 1", name, maxKeys)
		}
		c.keyOf, c.build, c.maxKeys = key, build, maxKeys
	})
}

// DrainUpTo sets how much of a discarded response body is read before it is
// closed, so that its connection can be reused (default 64 KiB).
func DrainUpTo(n int64) Option {
	return optionFunc(func(c *config) {
		if n < 0 {
			c.err = fmt.Errorf("httpmw: DrainUpTo(%d): must be >= 0", n)
		}
		c.drainUpTo = n
	})
}

// DefaultFailure is the default classification: a transport error, a 5xx
// or a 429.
func DefaultFailure(resp *http.Response, err error) bool {
	return err != nil || resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests
}

// NewTransport returns a RoundTripper that sends each request through c to
// base (http.DefaultTransport if nil). It is safe for concurrent use.
func NewTransport(base http.RoundTripper, c *chain.Chain, opts ...Option) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	cfg := &config{failure: DefaultFailure, drainUpTo: 64 << 10}
	for _, o := range opts {
		if o == nil {
			cfg.err = errors.New("httpmw: nil Option")
			continue
		}
		o.apply(cfg)
	}
	cfg.source = keyed.NewSource("httpmw", c, cfg.keyOf != nil, cfg.build, cfg.maxKeys, noFallback)
	return &transport{base: base, cfg: cfg}
}

// noFallback refuses a chain with a fallback: a fallback cannot produce an
// *http.Response; OnOpen does.
func noFallback(c *chain.Chain) error {
	for _, p := range c.Policies() {
		if _, ok := p.(*fallback.Policy); ok {
			return fmt.Errorf("httpmw: chain %v has a fallback, which cannot produce a response; use httpmw.OnOpen", c)
		}
	}
	return nil
}

type transport struct {
	base http.RoundTripper
	cfg  *config
}

// StatusError is the error the chain's policies see for a failing status.
// The caller does not get it: it gets the response.
type StatusError struct {
	StatusCode int
}

// Error gives the status code and text.
func (e *StatusError) Error() string {
	return "httpmw: " + strconv.Itoa(e.StatusCode) + " " + http.StatusText(e.StatusCode)
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

var errNoReplay = breaker.NotFailure(retry.Permanent(errors.New("httpmw: the request body was sent and cannot be replayed (no GetBody)")))

func (t *transport) retryable(req *http.Request) bool {
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

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	c, err := t.chainFor(req)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	x := &exchange{t: t, req: req, mayRetry: t.retryable(req)}
	// DoHolding: the returned body keeps its attempt context, if the chain
	// makes one, until it is closed.
	err = c.DoHolding(req.Context(), x.attempt)
	x.mu.Lock() // an attempt a policy left running (see attempt) ends first
	defer x.mu.Unlock()
	x.over = true
	if x.attempts == 0 {
		closeBody(req) // rejected before any attempt: the body is still ours to close
	}
	if cerr := req.Context().Err(); cerr != nil && err != nil {
		x.discard() // the caller gave up: it gets its context's error, as from net/http
		if !errors.Is(err, cerr) {
			err = cerr // retries that ended just as the caller gave up
		}
		return nil, err
	}
	if resp := x.last; resp != nil {
		// Success, or retries that ended on a status: the caller gets the
		// last response; its attempt context lives until its body is closed.
		x.body = resp.Body
		resp.Body = x
		return resp, nil
	}
	if x.attempts == 0 && errors.Is(err, breaker.ErrOpen) && t.cfg.onOpen != nil {
		return t.cfg.onOpen(req, err)
	}
	if err == nil {
		err = errors.New("httpmw: no response") // a chain that never called
	}
	return nil, err
}

// exchange is one RoundTrip: its attempts, the last response, and, once
// returned, that response's body, which releases the attempt's context when
// closed. One allocation serves all three.
type exchange struct {
	t        *transport
	req      *http.Request
	mayRetry bool
	attempts int
	last     *http.Response
	held     *chain.Held // last's attempt context, if the chain made one

	body   io.ReadCloser // the returned response's body
	closed sync.Once

	mu   sync.Mutex // held by the attempt in flight, and by RoundTrip after Do
	over bool       // RoundTrip has its result: no more attempts
}

// errConcurrent is what a second attempt at once gets.
var errConcurrent = breaker.NotFailure(retry.Permanent(errors.New("httpmw: attempts run one at a time, within RoundTrip; a policy that runs them at once (hedging), or after its Do returned, gets this error")))

// attempt sends one copy of the request with the attempt's context.
// Attempts run one at a time: an exchange keeps one response.
func (x *exchange) attempt(actx context.Context) error {
	if !x.mu.TryLock() {
		return errConcurrent
	}
	defer x.mu.Unlock()
	if x.over {
		return errConcurrent // a late call, after RoundTrip has returned
	}
	if x.attempts > 0 && !replayable(x.req) {
		// Also against a policy that retries a Permanent error: the body
		// was sent and is gone.
		return errNoReplay
	}
	var body io.ReadCloser
	if x.attempts > 0 && x.req.GetBody != nil {
		// Before discarding the last response: if the body cannot be
		// replayed, the caller gets that response.
		b, err := x.req.GetBody()
		if err != nil {
			return retry.Permanent(fmt.Errorf("httpmw: replaying the request body: %w", err))
		}
		body = b
	}
	x.attempts++
	x.discard()
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
	resp, err := x.t.base.RoundTrip(r)
	cfg := x.t.cfg
	if err != nil {
		if cfg.failure(nil, err) {
			return permanentUnless(x.mayRetry, err)
		}
		return breaker.NotFailure(retry.Permanent(err))
	}
	x.last, x.held = resp, chain.Hold(actx)
	if !cfg.failure(resp, nil) {
		return nil
	}
	se := &StatusError{StatusCode: resp.StatusCode}
	if d, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
		return permanentUnless(x.mayRetry, retry.After(se, d))
	}
	return permanentUnless(x.mayRetry, se)
}

// discard drains and closes the last response, and releases its context.
func (x *exchange) discard() {
	if x.last != nil {
		drainClose(x.last.Body, x.t.cfg.drainUpTo)
		x.held.Release()
		x.last, x.held = nil, nil
	}
}

// Read and Close make the exchange the returned response's body.
func (x *exchange) Read(p []byte) (int, error) { return x.body.Read(p) }

// Close closes the body and releases the attempt's context.
func (x *exchange) Close() error {
	err := x.body.Close()
	x.closed.Do(x.held.Release)
	return err
}

func (t *transport) chainFor(req *http.Request) (*chain.Chain, error) {
	if t.cfg.err != nil {
		return nil, t.cfg.err
	}
	var key string
	if t.cfg.source.PerKey() {
		key = t.cfg.keyOf(req)
	}
	return t.cfg.source.Get(key)
}

func permanentUnless(mayRetry bool, err error) error {
	if mayRetry {
		return err
	}
	return retry.Permanent(err)
}

// retryAfter parses a Retry-After value: delay seconds or an HTTP date.
func retryAfter(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		if s > math.MaxInt64/int64(time.Second) {
			return math.MaxInt64, true // centuries: past any MaxPushback
		}
		return time.Duration(s) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(time.Until(at), 0), true
	}
	return 0, false
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

func drainClose(body io.ReadCloser, upTo int64) {
	_, _ = io.CopyN(io.Discard, body, upTo)
	_ = body.Close()
}
