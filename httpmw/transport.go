package httpmw

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/internal/adapter"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/internal/keyed"
	"github.com/callguard/callguard/internal/telemetry"
)

// Transport is an http.RoundTripper that sends each request through a
// chain (or a chain per key) to a base RoundTripper. It is safe for
// concurrent use. Create one with [New].
type Transport struct {
	base   http.RoundTripper
	cfg    *config
	source keyed.Source[*prepared]
	tel    *telemetry.T // nil without Metrics and Logger
	// conns: the base is an *http.Transport whose connections per host
	// are bounded, so that a request may wait for one (see conns), or an
	// *Endpoints over one; nil otherwise.
	conns *conns
	// spreads: the base is an *Endpoints, which reads the endpoints the
	// request's earlier attempts tried from its attempts' contexts: an
	// attempt is sent with its exchange as its context (see
	// exchange.attempt).
	spreads bool
}

// prepared is a chain as the transport runs it: what it derives from the
// chain once, when it is built.
type prepared struct {
	chain    *chain.Chain
	fallback bool // requests carry their exchange for Respond
	hedge    bool // attempts may run at once
}

// New checks c and the options, and returns a Transport that sends each
// request through c (or through a chain per key, with [PerHost] or
// [PerKey]) to base (http.DefaultTransport if nil). Every invalid option
// is reported here, by name.
func New(base http.RoundTripper, c *chain.Chain, opts ...Option) (*Transport, error) {
	if base == nil {
		base = http.DefaultTransport
	}
	cfg := &config{Problems: adapter.Problems{Pkg: "httpmw"}, failure: DefaultFailure, drainUpTo: DefaultDrainUpTo, drainTimeout: DefaultDrainTimeout, judgeBody: true}
	if err := adapter.Apply(&cfg.Problems, opts, func(o Option) { o.apply(cfg) }); err != nil {
		return nil, err
	}
	t := &Transport{base: base, cfg: cfg}
	switch b := base.(type) {
	case *http.Transport:
		if b.MaxConnsPerHost > 0 {
			t.conns = connsOf(b)
		}
	case interface{ endpointConns() *conns }:
		t.conns, t.spreads = b.endpointConns(), true
	}
	tel, err := telemetry.New("httpmw", cfg.client, "server.address", cfg.meter, cfg.logger, func(fn func(string, *chain.Chain)) {
		t.source.Each(func(key string, p *prepared) { fn(key, p.chain) })
	})
	if err != nil {
		return nil, fmt.Errorf("httpmw: Metrics: %w", err)
	}
	t.tel = tel
	if eps, ok := base.(*Endpoints); ok {
		if err := tel.Endpoints(cfg.meter, eps.Statuses); err != nil {
			return nil, fmt.Errorf("httpmw: Metrics: %w", err)
		}
	}
	if cfg.perKey != nil {
		cfg.perKey.OnEvict = tel.Evicted(cfg.onEvict)
	}
	t.source, err = keyed.NewSource("httpmw", c, cfg.perKey, func(key string, c *chain.Chain) (*prepared, error) {
		adapter.Watch(c, key, tel.Watcher(key, cfg.onChange))
		tel.Built(key, c)
		return &prepared{chain: c, fallback: adapter.HasFallback(c), hedge: adapter.HasHedge(c)}, nil
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Breakers lists the breakers of the transport's chains, with their key in
// a keyed set ("" for the single chain), state and counters now, by key.
func (t *Transport) Breakers() []breaker.Snapshot {
	if t == nil || t.cfg == nil {
		return nil
	}
	return adapter.Snapshots(func(fn func(string, *chain.Chain)) {
		t.source.Each(func(key string, p *prepared) { fn(key, p.chain) })
	})
}

// Keys returns the counts of the transport's keyed set ([PerHost],
// [PerKey]); zero without one.
func (t *Transport) Keys() KeyStats {
	if t == nil || t.cfg == nil {
		return KeyStats{}
	}
	return KeyStats(t.source.Stats())
}

// KeyStats are the counts of a keyed set of chains. At most maxHosts (or
// maxKeys) chains are kept. A new key that would exceed the bound evicts the
// least recently used key whose breakers are all closed with no failure
// counted against them, looking at the 8 least recently used at most, so
// that a request's cost does not grow with the number of keys. A key with a
// breaker open, half-open, or on its way to tripping is not evicted: an
// outage is not forgotten (a rebuilt chain would start closed and send the
// downstream a new round of failures), and a client that can choose host
// names cannot push an open breaker out, until nobody has asked for the key
// in longer than twice its breakers' longest open stay or window, and at
// least a minute: what they know is stale by then, and a key a client
// stopped asking for after a failure cannot hold its slot forever. When none
// of the keys looked at can go, the new key is not kept: its requests run
// through one overflow chain, built with the key "(overflow)" and shared by
// every such key, so that more failing keys than the bound still trip a
// breaker; Breakers lists its breakers under that key, and the metrics count
// its requests under it. Keep the bound above the number of keys that can
// fail at once.
type KeyStats struct {
	Kept       int    // chains kept now (the overflow chain not counted)
	Evicted    uint64 // chains evicted since the transport was made
	Overflowed uint64 // requests of keys that found no room, through the overflow chain
}

// CloseIdleConnections closes the idle connections of the base
// RoundTripper, if it has a CloseIdleConnections method (as
// *http.Transport has); http.Client.CloseIdleConnections calls it.
func (t *Transport) CloseIdleConnections() {
	if t == nil {
		return
	}
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// BreakerHeader is set, to "open", on a response that the caller gets
// because a breaker ended the retries: the last failing response, when the
// next attempt would have been rejected.
const BreakerHeader = "Callguard-Breaker"

// exchangeKey carries, under a chain with a fallback, the exchange Respond
// answers.
type exchangeKey struct{}

// Respond makes resp the answer to the request that ctx belongs to: a
// fallback in the transport's chain calls it, and returns its result, to
// answer a failed request with a response of its own (a stale cache, a
// default body). It returns an error outside such a request. A fallback
// that returns nil without calling Respond makes the request fail.
//
//	fb, _ := fallback.New(func(ctx context.Context, err error) error {
//		return httpmw.Respond(ctx, &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(cached))})
//	}, fallback.OnAnyFailure())
func Respond(ctx context.Context, resp *http.Response) error {
	x, _ := ctx.Value(exchangeKey{}).(*exchange)
	switch {
	case x == nil:
		return errors.New("httpmw: Respond outside a fallback of an httpmw transport's chain")
	case resp == nil:
		return errors.New("httpmw: Respond(nil): needs a response")
	}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.answer != nil {
		_ = x.answer.Body.Close()
	}
	x.answer = resp
	return nil
}

var (
	errNoResponse       = errors.New("httpmw: no response") // a chain that never called
	errZeroTransport    = errors.New("httpmw: a zero Transport; make one with httpmw.New")
	errFallbackNoAnswer = errors.New("httpmw: the chain's fallback answered without a response; call httpmw.Respond in it")
)

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t == nil || t.cfg == nil {
		closeBody(req)
		return nil, errZeroTransport
	}
	p, key, err := t.chainFor(req)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	var attempts int
	resp, err := t.roundTrip(req, p, &attempts)
	if t.tel != nil || t.cfg.tracing != nil {
		outcome := t.outcome(req, resp, err)
		t.tel.Call(key, req.URL.Host, telemetry.DefaultPort(req.URL.Scheme), outcome, attempts)
		t.cfg.tracing.Ended(req.Context(), outcome, attempts, err)
	}
	return resp, err
}

// outcome is how a request that ended with resp, err went, for the
// metrics and the caller's span.
func (t *Transport) outcome(req *http.Request, resp *http.Response, err error) telemetry.Outcome {
	outcome := telemetry.Classify(req.Context(), err)
	switch {
	case err != nil:
	case resp == nil: // an OnOpen that answered nothing
		outcome = telemetry.Rejected
	case resp.Header.Get(BreakerHeader) == "open", resp.Header.Get(RejectedHeader) != "":
		outcome = telemetry.Rejected
	case t.cfg.failure(resp, nil):
		outcome = telemetry.Failed
	}
	return outcome
}

func (t *Transport) roundTrip(req *http.Request, p *prepared, attempts *int) (*http.Response, error) {
	var err error
	x := &exchange{t: t, req: req, mayRetry: t.retryable(req)}
	ctx := req.Context()
	if p.fallback {
		ctx = context.WithValue(ctx, exchangeKey{}, x)
	}
	if p.hedge && !x.mayRetry {
		ctx = adapter.NoHedge(ctx) // hedged like retried: idempotent, replayable requests only
	}
	// A policy or a callback of the chain that panics: what the exchange
	// kept is closed, the panic goes on.
	finished := false
	defer func() {
		if !finished {
			x.call.Close()
			x.discard()
		}
	}()
	// The returned body keeps its attempt context, if the chain makes one,
	// until it is closed; with CountBodyErrors, the breakers' permits too.
	x.Context = ctx
	if t.cfg.judgeBody {
		err = bridge.ChainDoDeferred(p.chain, x, &x.deferred, exchangeAttempt)
	} else {
		err = bridge.ChainDoHolding(p.chain, x, exchangeAttempt)
	}
	finished = true
	// The call's answer is decided: an attempt a policy left running is
	// dropped when it answers.
	started, _, _ := x.call.Close()
	*attempts = started
	if started == 0 {
		closeBody(req) // rejected before any attempt: the body is still ours to close
	}
	x.mu.Lock() // a fallback's answer (Respond)
	defer x.mu.Unlock()
	if cerr := req.Context().Err(); cerr != nil && err != nil {
		x.discard() // the caller gave up: it gets its context's error, as from net/http
		if !errors.Is(err, cerr) {
			err = cerr // retries that ended just as the caller gave up
		}
		return nil, err
	}
	if x.answer != nil {
		// A fallback's response.
		x.discard()
		return x.answer, nil
	}
	if resp := x.last; resp != nil {
		if err == nil && p.fallback && t.cfg.failure(resp, nil) {
			x.discard() // a fallback took the failure without answering
			return nil, errFallbackNoAnswer
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			// A protocol upgrade: its body is the connection, as net/http
			// gives it, which no attempt context bounds any more.
			x.held.Release()
			x.deferred.Done(nil)
			x.last, x.held = nil, nil
			return resp, nil
		}
		if err != nil && errors.Is(err, breaker.ErrOpen) {
			// The retries ended on an open breaker: the caller gets the last
			// answer, marked.
			resp.Header.Set(BreakerHeader, "open")
		}
		// Success, or retries that ended on a status: the caller gets the
		// last response; its attempt context (and, with CountBodyErrors,
		// its permits) live until its body is done with.
		x.body = resp.Body
		resp.Body = x
		x.last = nil
		if x.body == http.NoBody {
			x.settle(nil) // nothing to read: the outcome is known
		}
		return resp, nil
	}
	if started == 0 && errors.Is(err, breaker.ErrOpen) && t.cfg.onOpen != nil {
		return t.cfg.onOpen(req, err)
	}
	if started == 0 && t.cfg.asResponses && (errors.Is(err, callguard.ErrRejected) || errors.Is(err, breaker.ErrOpen)) {
		return rejected(req, err), nil
	}
	if err == nil {
		if p.fallback {
			err = errFallbackNoAnswer
		} else {
			err = errNoResponse
		}
	}
	return nil, err
}

func (t *Transport) chainFor(req *http.Request) (*prepared, string, error) {
	var key string
	if t.source.PerKey() {
		key = t.cfg.keyOf(req)
	}
	return t.source.GetKey(key)
}

// StatusError is the error the chain's policies see for a failing status.
// The caller does not get it: it gets the response.
type StatusError struct {
	StatusCode int
}

// Overloaded reports whether err is a downstream's refusal for overload:
// a 429 Too Many Requests (a 503 is left out: servers and proxies also
// answer it when the downstream is down, which a breaker must see). Give
// it to the breaker of a chain that has a concurrency limit, as
// breaker.Settings.IsExcluded: the breaker then leaves fast overload
// refusals to the limit, which sheds just the excess, instead of opening
// on them and refusing everything for its stay (docs/protection.md).
func Overloaded(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.StatusCode == http.StatusTooManyRequests
}

// Error gives the status code and text.
func (e *StatusError) Error() string {
	return "httpmw: " + strconv.Itoa(e.StatusCode) + " " + http.StatusText(e.StatusCode)
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// RejectedHeader is set on the 503 answer that stands for a rejection
// with [RejectionResponses]: a breaker, a throttle, a limiter or a
// bulkhead of the chain refused the request before it was sent (its
// value is the rejection's message, which says which and why).
const RejectedHeader = "Callguard-Rejected"

// rejected is the answer, with RejectionResponses, to a request the chain
// refused before any attempt was sent: 503 Service Unavailable, as a
// server that sheds load answers, marked with RejectedHeader.
func rejected(req *http.Request, err error) *http.Response {
	h := http.Header{}
	h.Set(RejectedHeader, err.Error())
	return &http.Response{
		Status: "503 Service Unavailable", StatusCode: http.StatusServiceUnavailable,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: http.NoBody, ContentLength: 0, Request: req,
	}
}
