package grpcmw

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/internal/adapter"
	"github.com/callguard/callguard/internal/keyed"
	"github.com/callguard/callguard/internal/telemetry"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// Option configures the interceptors.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	adapter.Problems // the first invalid option
	idempotent       map[string]bool
	all              bool
	classify         func(codes.Code) Class
	perKey           *keyed.PerKeyOption
	keyOf            func(ctx context.Context, method string, cc *grpc.ClientConn) string
	bufMsgs          int
	bufBytes         int
	firstMsg         time.Duration
	unaryOnly        bool
	onChange         func(breaker.StateChange)
	onEvict          func(key string)
	readyProbes      bool
	fromHeader       bool // JudgeFromHeader
	meter            metric.MeterProvider
	client           string             // Client
	tracing          *telemetry.Tracing // Tracing
	rejectionCode    *codes.Code        // RejectionCode
	logger           *slog.Logger
	tel              *telemetry.T // nil without Metrics and Logger
	source           keyed.Source[*prepared]
	endpoints        *EndpointHealth // Endpoints
	// deadlineCode: a retry that gave up because its wait would outlive
	// the deadline ends DeadlineExceeded, as grpc-go's would at the
	// deadline (FromServiceConfig).
	deadlineCode bool
	// succeeded, if not nil, is told of each call that succeeded (a
	// stream: at its clean end): a service config's retry throttle.
	succeeded func()
	// headerCommit: a unary attempt whose response carried a header is
	// not retried, as grpc-go commits a call then (FromServiceConfig).
	headerCommit bool
	// streamDeadline: the timeouts outside the retry bound a stream's
	// whole life, not only its creation, as grpc-go's methodConfig
	// timeout (FromServiceConfig).
	streamDeadline bool
	// retryBuffer, if not 0, is grpc-go's retry buffer: a call whose
	// sent messages, framed (5 bytes each), pass it is not retried; a
	// grpc.MaxRetryRPCBufferSize call option replaces it
	// (FromServiceConfig).
	retryBuffer int
}

// Idempotent declares methods safe to retry, by full name:
// "/package.Service/Method", as in the generated *_FullMethodName
// constants (for example grpc_health_v1.Health_Check_FullMethodName). A
// name of another form is an error: it would match no call, and nothing
// would ever be retried.
func Idempotent(methods ...string) Option {
	return optionFunc(func(c *config) {
		for _, m := range methods {
			if !fullMethodName(m) {
				c.Fail("Idempotent(%q): not a full method name: use \"/package.Service/Method\", with the leading slash, as in the generated *_FullMethodName constants", m)
				continue
			}
			c.idempotent[m] = true
		}
	})
}

// fullMethodName reports a name of the form "/service/method", both
// non-empty.
func fullMethodName(m string) bool {
	rest, ok := strings.CutPrefix(m, "/")
	if !ok {
		return false
	}
	service, method, ok := strings.Cut(rest, "/")
	return ok && service != "" && method != "" && !strings.Contains(method, "/")
}

// AllIdempotent declares every method safe to retry.
func AllIdempotent() Option { return optionFunc(func(c *config) { c.all = true }) }

// Classify replaces [DefaultClassify].
func Classify(fn func(codes.Code) Class) Option {
	return optionFunc(func(c *config) {
		if c.Func("Classify", fn == nil) {
			c.classify = fn
		}
	})
}

// PerMethod keeps a chain, with its own breaker state, per method: build
// makes the chain for a method on its first call; at most maxKeys are kept.
// Unary calls and streams of a method share its chain. The chain given to
// [NewInterceptors] is then unused and may be nil. See [KeyStats] for what
// happens at the bound.
func PerMethod(build func(method string) (*chain.Chain, error), maxKeys int) Option {
	return perKey("PerMethod", func(_ context.Context, method string, _ *grpc.ClientConn) string { return method }, build, maxKeys)
}

// PerTarget keeps a chain per connection target (cc.Target()).
func PerTarget(build func(target string) (*chain.Chain, error), maxKeys int) Option {
	return perKey("PerTarget", func(_ context.Context, _ string, cc *grpc.ClientConn) string {
		if cc == nil {
			return ""
		}
		return cc.Target()
	}, build, maxKeys)
}

// PerKey keeps a chain per key computed by key.
func PerKey(key func(ctx context.Context, method string, cc *grpc.ClientConn) string, build func(key string) (*chain.Chain, error), maxKeys int) Option {
	return perKey("PerKey", key, build, maxKeys)
}

func perKey(name string, key func(ctx context.Context, method string, cc *grpc.ClientConn) string, build func(key string) (*chain.Chain, error), maxKeys int) Option {
	return optionFunc(func(c *config) {
		c.keyOf = key
		c.perKey = &keyed.PerKeyOption{Name: name, KeyNil: key == nil, Build: build, MaxKeys: maxKeys}
	})
}

// StreamBuffer bounds what a stream keeps to replay on a retry: at most
// msgs messages and bytes bytes of proto messages; past either, or after a
// message that is not a proto message, the stream is no longer retried.
// Default 16 messages, 64 KiB; at most 1024 messages and 64 KiB, since a
// retry sends the replay before it reads any response and a larger one
// could block on HTTP/2 flow control.
func StreamBuffer(msgs, bytes int) Option {
	return optionFunc(func(c *config) {
		switch {
		case msgs < 0 || bytes < 0:
			c.Fail("StreamBuffer(%d, %d): must be >= 0", msgs, bytes)
		case msgs > maxReplayMsgs || bytes > maxReplayBytes:
			c.Fail("StreamBuffer(%d, %d): at most %d messages and %d bytes: a retry replays them before reading any response, and a larger replay could block on HTTP/2 flow control",
				msgs, bytes, maxReplayMsgs, maxReplayBytes)
		}
		c.bufMsgs, c.bufBytes = msgs, bytes
	})
}

// FirstMessageTimeout bounds, for each attempt at a stream, the wait for
// its first response message once the client has closed its send side (so
// an upload, or a bidi call still sending, is not cut short). It ends the
// attempt as a failure, inside every breaker; the stream may then be
// retried. Default: none. The chain's own timeouts bound only each
// attempt's creation: a subscription whose first event comes late is not
// cut short by the unary attempt timeout.
func FirstMessageTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.Fail("FirstMessageTimeout(%v): must be > 0", d)
		}
		c.firstMsg = d
	})
}

// UnaryOnly makes the interceptors for unary calls only: [NewInterceptors]
// then accepts a chain that a stream cannot apply (a fallback, or a policy
// of your own), and [Interceptors.DialOptions] installs no stream
// interceptor.
func UnaryOnly() Option { return optionFunc(func(c *config) { c.unaryOnly = true }) }

// OnStateChange makes fn receive every state change of the breakers in the
// interceptors' chains, with the key of the chain in a keyed set
// ([PerMethod], [PerTarget], [PerKey]; "" for the single chain). It is
// called after the change, with no lock held, in order for each breaker,
// alongside the breaker's own Settings.OnStateChange.
func OnStateChange(fn func(breaker.StateChange)) Option {
	return optionFunc(func(c *config) {
		if c.Func("OnStateChange", fn == nil) {
			c.onChange = fn
		}
	})
}

// JudgeFromHeader judges a unary call's attempt on the downstream's time
// rather than on its whole time: an attempt that its deadline cut before
// it had half its time on the downstream's side — because it waited in the
// client's own transport for stream quota (a server's
// grpc.MaxConcurrentStreams) on a connection that exists — is the
// client's wait. Its error is then an *attempt.Queued (its Error says how
// long it waited), neutral to the breakers, counted "client_queue" in
// callguard.calls. Without it, a server that allows few streams at once
// and answers within its time opens the breaker: 40 callers on a server
// allowing one stream, a 50 ms attempt timeout and 30 ms answers
// (docs/attempts.md).
//
// The downstream's time is the time with the server, from when the
// attempt's header went out (grpc-go's stats.OutHeader), and the time
// waiting for a connection to be made: grpc-go holds a call while its
// channel is not READY (CONNECTING, for up to its 20 s connect timeout),
// until its stats.DelayedPickComplete; an attempt cut before either, on a
// channel not READY (ClientConn.GetState, read when it fails), spent all
// its time so. An unreachable server (a dial that hangs, a handshake that
// never ends) thus opens the breaker as without this option. On a READY
// channel, a call with no header out waits for stream quota.
//
// [Interceptors.DialOptions] adds a stats handler (grpc.WithStatsHandler)
// that marks both events. With that handler on the connection, grpc-go
// makes its stats events for every call (measured: see docs/attempts.md);
// an interceptor installed without DialOptions gets the handler from
// [Interceptors.StatsHandler]. Streams are judged from when they began, as
// without it.
func JudgeFromHeader() Option { return optionFunc(func(c *config) { c.fromHeader = true }) }

// ProbesWaitForReady says whether an attempt made while a breaker of its
// chain is half-open (a probe: a unary call's attempt, or a stream's
// creation) waits for the connection to be ready (on by default): the attempt gets grpc.WaitForReady(true), and
// a connection in TRANSIENT_FAILURE is told to reconnect at once
// (ClientConn.ResetConnectBackoff), once per probe, so at most once per
// open stay. Without it, a probe made while grpc-go waits out its
// reconnect backoff fails at once, though the server may be back, and the
// breaker opens again for another stay: after a restart, the breaker
// closed about a second later than over HTTP (docs/reliability.md). A
// probe still ends at its attempt timeout or the caller's deadline; one
// with neither (a chain with no timeout, a caller with no deadline) does
// not wait, as it would hold its slot for the whole outage.
func ProbesWaitForReady(on bool) Option {
	return optionFunc(func(c *config) { c.readyProbes = on })
}

// Client names the interceptors in their metrics and logs: every instrument
// carries callguard.client with it, so that two clients reporting to one
// MeterProvider are told apart, down to each policy's series. Without it,
// the name is the package's, "grpcmw", for the first such adapter built in
// the process, then "grpcmw-2", "grpcmw-3", … in the order they are built: name
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

// RejectionCode sets the status code of a unary call the chain refused
// before any attempt reached the downstream — a breaker open, or a throttle, a
// limiter or a bulkhead refusing it — in place of the defaults,
// codes.Unavailable for a breaker and codes.ResourceExhausted for the
// others. errors.Is(err, breaker.ErrOpen) and errors.Is(err,
// callguard.ErrRejected) still tell them apart. It is for a client
// library with a retry of its own above the interceptors, which retries
// Unavailable until its deadline and so turns a breaker's fail-fast into
// a wait: give it a code that library does not retry (docs/grpc.md,
// "Client libraries with their own retry"). A breaker that ends the
// retries after an attempt reached the downstream gives the caller that
// attempt's status, as without it.
//
// Streams keep the defaults: such libraries do not retry a stream's
// creation themselves but re-create a long-lived stream (a watch) on
// Unavailable, with a backoff of their own, and end it for good on any
// other code — etcd's Watch does (TestRejectionCodeKeepsWatches).
func RejectionCode(code codes.Code) Option {
	return optionFunc(func(c *config) {
		if code == codes.OK {
			c.Fail("RejectionCode(OK): a rejection is not a success; pick a failing code")
			return
		}
		c.rejectionCode = &code
	})
}

// Tracing makes each attempt of a call, unary or stream, a span of tp's, a child of
// the caller's span (with otelgrpc's stats handler beneath, its client
// span is the attempt span's child): callguard.attempt, with
// callguard.attempt (from 1), rpc.method, callguard.hedge and, from the
// second attempt, grpc.previous-rpc-attempts (gRFC A72's), its status an
// error when the attempt failed. On the caller's span, an attempt after
// the first is the event callguard.retry or callguard.hedge, a rejection
// the event callguard.rejected (callguard.rejected.by breaker or limit,
// callguard.reason), and the call's end the attributes callguard.attempts
// and callguard.outcome (for a stream, when it could not be established;
// an established stream's outcome is its last attempt span's status).
// Through the OpenTelemetry trace API only; see docs/observability.md.
func Tracing(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if c.Func("Tracing", tp == nil) {
			c.tracing = telemetry.NewTracing(tp, "rpc.method", "grpc.previous-rpc-attempts")
		}
	})
}

// Metrics makes the interceptors report OpenTelemetry metrics to mp (see
// docs/observability.md): unary calls by outcome, and, read when mp
// collects, the state and counters of the chains' breakers, the timeouts'
// values, the retries and the retry budgets, by key.
func Metrics(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if c.Func("Metrics", mp == nil) {
			c.meter = mp
		}
	})
}

// Logger makes the interceptors log to l: breaker state changes (an open at
// Warn, others at Info), the lint's findings on its chain (once) and on
// each chain built for a key, and evictions.
func Logger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if c.Func("Logger", l == nil) {
			c.logger = l
		}
	})
}

// OnEvict makes fn receive the key of every chain a keyed set ([PerMethod],
// [PerTarget], [PerKey]) evicts to make room for a new key (see
// [KeyStats]), on the goroutine of the call that made room, with no lock
// held.
func OnEvict(fn func(key string)) Option {
	return optionFunc(func(c *config) {
		if c.Func("OnEvict", fn == nil) {
			c.onEvict = fn
		}
	})
}

// callSettings reads the per-call options.
func (cfg *config) callSettings(method string, opts []grpc.CallOption) (idempotent bool, maxAttempts int) {
	idempotent = cfg.all || cfg.idempotent[method]
	for _, o := range opts {
		switch o := o.(type) {
		case IdempotencyOption:
			idempotent = o.Idempotent
		case MaxAttemptsOption:
			maxAttempts = o.Attempts
		}
	}
	return idempotent, maxAttempts
}

// IdempotencyOption is a grpc.CallOption that marks one call as safe (or not)
// to retry. Make one with [WithIdempotency].
type IdempotencyOption struct {
	grpc.EmptyCallOption
	Idempotent bool
}

// WithIdempotency marks this call as safe to retry, or not, whatever the
// interceptor's options say.
func WithIdempotency(idempotent bool) grpc.CallOption {
	return IdempotencyOption{Idempotent: idempotent}
}

// MaxAttemptsOption is a grpc.CallOption that caps one call's attempts. Make
// one with [WithMaxAttempts].
type MaxAttemptsOption struct {
	grpc.EmptyCallOption
	Attempts int
}

// WithMaxAttempts caps this call's attempts, counting the first; it can lower
// the chain's retry, not raise it.
func WithMaxAttempts(n int) grpc.CallOption { return MaxAttemptsOption{Attempts: n} }
