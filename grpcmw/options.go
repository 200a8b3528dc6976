package grpcmw

import (
	"context"
	"errors"
	"fmt"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/internal/keyed"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// Option configures an interceptor.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	idempotent map[string]bool
	all        bool
	classify   func(codes.Code) Class
	keyOf      func(ctx context.Context, method string, cc *grpc.ClientConn) string
	build      func(key string) (*chain.Chain, error)
	maxKeys    int
	source     keyed.Source
	bufMsgs    int
	bufBytes   int
	err        error
}

// Idempotent declares methods, by full name ("/pkg.Service/Method"), safe to
// retry.
func Idempotent(methods ...string) Option {
	return optionFunc(func(c *config) {
		for _, m := range methods {
			c.idempotent[m] = true
		}
	})
}

// AllIdempotent declares every method safe to retry.
func AllIdempotent() Option { return optionFunc(func(c *config) { c.all = true }) }

// Classify replaces [DefaultClassify].
func Classify(fn func(codes.Code) Class) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			c.err = errors.New("grpcmw: Classify(nil)")
		}
		c.classify = fn
	})
}

// PerMethod keeps a chain, with its own breaker state, per method: build
// makes the chain for a method on its first call; at most maxKeys are kept
// (the least recently used is dropped). The chain given to the interceptor
// is then unused and may be nil.
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
		switch {
		case key == nil:
			c.err = fmt.Errorf("grpcmw: %s needs a key function", name)
		case build == nil:
			c.err = fmt.Errorf("grpcmw: %s needs a function that builds a chain", name)
		case maxKeys < 1:
			c.err = fmt.Errorf("grpcmw: %s(…, %d): the maximum number of keys must be >= 1", name, maxKeys)
		}
		c.keyOf, c.build, c.maxKeys = key, build, maxKeys
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
			c.err = fmt.Errorf("grpcmw: StreamBuffer(%d, %d): must be >= 0", msgs, bytes)
		case msgs > maxReplayMsgs || bytes > maxReplayBytes:
			c.err = fmt.Errorf("grpcmw: StreamBuffer(%d, %d): at most %d messages and %d bytes: a retry replays them before reading any response, and a larger replay could block on HTTP/2 flow control",
				msgs, bytes, maxReplayMsgs, maxReplayBytes)
		}
		c.bufMsgs, c.bufBytes = msgs, bytes
	})
}

func newConfig(c *chain.Chain, opts []Option) *config {
	cfg := &config{idempotent: map[string]bool{}, classify: DefaultClassify, bufMsgs: 16, bufBytes: 64 << 10}
	for _, o := range opts {
		if o == nil {
			cfg.err = errors.New("grpcmw: nil Option")
			continue
		}
		o.apply(cfg)
	}
	cfg.source = keyed.NewSource("grpcmw", c, cfg.keyOf != nil, cfg.build, cfg.maxKeys, noFallback)
	return cfg
}

func (cfg *config) chainFor(ctx context.Context, method string, cc *grpc.ClientConn) (*chain.Chain, error) {
	if cfg.err != nil {
		return nil, cfg.err
	}
	var key string
	if cfg.source.PerKey() {
		key = cfg.keyOf(ctx, method, cc)
	}
	return cfg.source.Get(key)
}

// noFallback refuses a chain with a fallback: a fallback cannot fill the
// caller's gRPC reply, so the call would succeed with an empty message.
func noFallback(c *chain.Chain) error {
	for _, p := range c.Policies() {
		if _, ok := p.(*fallback.Policy); ok {
			return fmt.Errorf("grpcmw: chain %v has a fallback, which cannot fill a gRPC reply; handle the error instead (errors.Is(err, breaker.ErrOpen))", c)
		}
	}
	return nil
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

// DialOptions returns the dial options that put c on a connection: both
// interceptors, and grpc.WithDisableRetry so that grpc-go's own retry does
// not multiply the chain's attempts.
func DialOptions(c *chain.Chain, opts ...Option) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(UnaryClientInterceptor(c, opts...)),
		grpc.WithChainStreamInterceptor(StreamClientInterceptor(c, opts...)),
		grpc.WithDisableRetry(),
	}
}
