package httpmw

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/internal/adapter"
	"github.com/callguard/callguard/internal/keyed"
	"github.com/callguard/callguard/internal/telemetry"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Option configures a transport.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	adapter.Problems // the first invalid option
	retryAll         bool
	failure          func(*http.Response, error) bool
	onOpen           func(*http.Request, error) (*http.Response, error)
	perKey           *keyed.PerKeyOption
	keyOf            func(*http.Request) string
	drainUpTo        int64
	drainTimeout     time.Duration
	judgeBody        bool
	onChange         func(breaker.StateChange)
	onEvict          func(key string)
	meter            metric.MeterProvider
	client           string             // Client
	asResponses      bool               // RejectionResponses
	tracing          *telemetry.Tracing // Tracing
	logger           *slog.Logger
}

// Defaults of the options.
const (
	// DefaultDrainUpTo is how much of a discarded response body is read
	// before it is closed (see DrainUpTo).
	DefaultDrainUpTo = 64 << 10
	// DefaultDrainTimeout bounds how long draining a discarded body may
	// delay the next attempt (see DrainTimeout).
	DefaultDrainTimeout = 50 * time.Millisecond
)

// RetryAll lets non-idempotent requests (POST, PATCH, … without an
// Idempotency-Key) be retried too.
func RetryAll() Option { return optionFunc(func(c *config) { c.retryAll = true }) }

// FailureIf replaces the default classification (transport errors, 5xx and
// 429 are failures). It is called with the response or the transport error
// (resp nil), also with an error reading a response body (see
// CountBodyErrors).
func FailureIf(fn func(resp *http.Response, err error) bool) Option {
	return optionFunc(func(c *config) {
		if c.Func("FailureIf", fn == nil) {
			c.failure = fn
		}
	})
}

// RejectionResponses answers a request the chain refused before any
// attempt was sent — a breaker open, or a throttle, a limiter or a
// bulkhead refusing it — with a 503 Service Unavailable marked
// [RejectedHeader], as a server shedding load answers, instead of an
// error. Without it (the default), RoundTrip returns the rejection as an
// error, which http.Client wraps in a *url.Error: errors.Is(err,
// breaker.ErrOpen) or errors.Is(err, callguard.ErrRejected) tells it from
// the downstream's own answers, and nothing reached the server. The
// default is an error because a synthetic 503 looks like the
// downstream's: a retry layer above, or a proxy passing it on, would take
// it for one. [OnOpen] answers a breaker's rejection in its own way,
// either way.
func RejectionResponses() Option {
	return optionFunc(func(c *config) { c.asResponses = true })
}

// OnOpen answers a request that the breaker rejects before any attempt
// reached the server, for example from a stale cache. Its result is
// RoundTrip's result. The request's body has been closed by then. (A
// fallback in the chain can answer any failure; see Respond.)
func OnOpen(fn func(req *http.Request, err error) (*http.Response, error)) Option {
	return optionFunc(func(c *config) {
		if c.Func("OnOpen", fn == nil) {
			c.onOpen = fn
		}
	})
}

// PerHost keeps a chain, with its own breaker state, per request host
// (req.URL.Host): build makes a host's chain on its first request; at most
// maxHosts are kept. The chain given to [New] is then unused and may be
// nil. See [KeyStats] for what happens at the bound.
func PerHost(build func(host string) (*chain.Chain, error), maxHosts int) Option {
	return perKey("PerHost", func(r *http.Request) string { return r.URL.Host }, build, maxHosts)
}

// PerKey keeps a chain per key computed from the request.
func PerKey(key func(*http.Request) string, build func(key string) (*chain.Chain, error), maxKeys int) Option {
	return perKey("PerKey", key, build, maxKeys)
}

// OnEvict makes fn receive the key of every chain a keyed set ([PerHost],
// [PerKey]) evicts to make room for a new key (see [KeyStats]), on the
// goroutine of the request that made room, with no lock held.
func OnEvict(fn func(key string)) Option {
	return optionFunc(func(c *config) {
		if c.Func("OnEvict", fn == nil) {
			c.onEvict = fn
		}
	})
}

// Client names the transport in their metrics and logs: every instrument
// carries callguard.client with it, so that two clients reporting to one
// MeterProvider are told apart, down to each policy's series. Without it,
// the name is the package's, "httpmw", for the first such adapter built in
// the process, then "httpmw-2", "httpmw-3", … in the order they are built: name
// each client for series that stay the same across restarts.
func Client(name string) Option {
	return optionFunc(func(c *config) {
		if name == "" {
			c.Fail("Client(\"\"): needs a name")
			return
		}
		c.client = name
	})
}

// Tracing makes each attempt of a request a span of tp's, a child of the
// caller's span (with an instrumented base beneath, otelhttp's
// NewTransport, its client span is the attempt span's child):
// callguard.attempt, with callguard.attempt (from 1), server.address,
// callguard.hedge and, from the second attempt, http.request.resend_count,
// its status an error when the attempt failed. On the caller's span, an
// attempt after the first is the event callguard.retry or callguard.hedge,
// a rejection the event callguard.rejected (callguard.rejected.by breaker
// or limit, callguard.reason), and the request's end the attributes
// callguard.attempts and callguard.outcome. Through the OpenTelemetry
// trace API only; see docs/observability.md.
func Tracing(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if c.Func("Tracing", tp == nil) {
			c.tracing = telemetry.NewTracing(tp, "server.address", "http.request.resend_count")
		}
	})
}

// Metrics makes the transport report OpenTelemetry metrics to mp (see
// docs/observability.md): requests by outcome, and, read when mp
// collects, the state and counters of the chains' breakers, the timeouts'
// values, the retries and the retry budgets, by key.
func Metrics(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if c.Func("Metrics", mp == nil) {
			c.meter = mp
		}
	})
}

// Logger makes the transport log to l: breaker state changes (an open at
// Warn, others at Info), the lint's findings on its chain (once) and on
// each chain built for a key, and evictions.
func Logger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if c.Func("Logger", l == nil) {
			c.logger = l
		}
	})
}

func perKey(name string, key func(*http.Request) string, build func(key string) (*chain.Chain, error), maxKeys int) Option {
	return optionFunc(func(c *config) {
		c.keyOf = key
		c.perKey = &keyed.PerKeyOption{Name: name, KeyNil: key == nil, Build: build, MaxKeys: maxKeys}
	})
}

// DrainUpTo sets how much of a discarded response body is read before it is
// closed, so that its connection can be reused (default 64 KiB).
func DrainUpTo(n int64) Option {
	return optionFunc(func(c *config) {
		if n < 0 {
			c.Fail("DrainUpTo(%d): must be >= 0", n)
		}
		c.drainUpTo = n
	})
}

// DrainTimeout bounds the time spent draining a discarded response body
// (default 50 ms): a body that has not arrived by then is closed, giving up
// its connection, so that a server that sends a 503's headers and stalls
// its body cannot delay the next attempt. 0 does not wait at all: every
// discarded body is closed undrained.
func DrainTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 {
			c.Fail("DrainTimeout(%v): must be >= 0", d)
		}
		c.drainTimeout = d
	})
}

// CountBodyErrors decides whether the body of a returned response counts
// toward the breakers (default true). When it does, a successful attempt
// keeps its breakers' permits until its body is read to the end, fails or
// is closed: an error reading it (a connection reset, the attempt timeout
// during the read) is a failure of the downstream, the end of the body or
// a Close is a success, and the caller's own cancellation is neutral. A
// half-open probe's slot is then held until the body is done with, so
// close every body (as net/http requires); an adaptive attempt timeout
// learns the answer's latency, body included, then. With false, a
// response counts when its headers arrive, for the breakers and for an
// adaptive timeout, which then learns from the headers alone (and a body
// slower than it is cut).
func CountBodyErrors(on bool) Option {
	return optionFunc(func(c *config) { c.judgeBody = on })
}

// OnStateChange makes fn receive every state change of the breakers in the
// transport's chains, with the key of the chain in a keyed set ([PerHost],
// [PerKey]; "" for the single chain). It is called after the change, with
// no lock held, in order for each breaker, alongside the breaker's own
// Settings.OnStateChange.
func OnStateChange(fn func(breaker.StateChange)) Option {
	return optionFunc(func(c *config) {
		if c.Func("OnStateChange", fn == nil) {
			c.onChange = fn
		}
	})
}

// DefaultFailure is the default classification: a transport error, a 5xx
// or a 429.
func DefaultFailure(resp *http.Response, err error) bool {
	return err != nil || resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests
}
