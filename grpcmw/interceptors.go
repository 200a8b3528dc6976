package grpcmw

import (
	"context"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/internal/adapter"
	"github.com/callguard/callguard/internal/keyed"
	"google.golang.org/grpc"
)

// Interceptors are a unary and a stream client interceptor that share one
// configuration: one chain, or one chain per key, so that a target's unary
// calls and streams go through the same breakers. Create them with
// [NewInterceptors]; they are safe for concurrent use.
type Interceptors struct{ cfg *config }

// NewInterceptors checks c and the options, and returns the interceptors
// that run calls through c (or through a chain per key, with [PerMethod],
// [PerTarget] or [PerKey]). Every invalid option is reported here, by
// name, and so is a chain a stream cannot apply: one with a fallback or a
// policy of your own, which only unary calls can run (use [UnaryOnly], or
// give streams a chain of breakers, retries and timeouts). A chain built
// per key is checked when its key is first used: its streams then fail
// with that error.
func NewInterceptors(c *chain.Chain, opts ...Option) (*Interceptors, error) {
	cfg, err := newConfig(c, opts)
	if err != nil {
		return nil, err
	}
	return &Interceptors{cfg: cfg}, nil
}

// Unary returns the unary client interceptor. Install it with
// grpc.WithChainUnaryInterceptor, or use [Interceptors.DialOptions].
func (i *Interceptors) Unary() grpc.UnaryClientInterceptor { return i.cfg.unary() }

// Stream returns the stream client interceptor (with [UnaryOnly], one that
// passes streams through untouched). Install it with
// grpc.WithChainStreamInterceptor, or use [Interceptors.DialOptions].
func (i *Interceptors) Stream() grpc.StreamClientInterceptor {
	if i.cfg.unaryOnly {
		return passStream
	}
	return i.cfg.stream()
}

// DialOptions returns the dial options that put the interceptors on a
// connection: the unary one, the stream one (unless [UnaryOnly]), and
// grpc.WithDisableRetry, so that grpc-go's own retry does not multiply the
// chain's attempts.
func (i *Interceptors) DialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithChainUnaryInterceptor(i.Unary())}
	if !i.cfg.unaryOnly {
		opts = append(opts, grpc.WithChainStreamInterceptor(i.Stream()))
	}
	return append(opts, grpc.WithDisableRetry())
}

// Breakers lists the breakers of the interceptors' chains, with their key
// in a keyed set ("" for the single chain), state and counters now, by key.
func (i *Interceptors) Breakers() []breaker.Snapshot {
	return adapter.Snapshots(func(fn func(string, *chain.Chain)) {
		i.cfg.source.Each(func(key string, p *prepared) { fn(key, p.chain) })
	})
}

// UnaryClientInterceptor runs each unary call through c (or through the
// chain of its key, with [PerKey]). An invalid option makes every call fail
// with its error; [NewInterceptors] reports it once instead. Streams need
// [StreamClientInterceptor], and share no breaker state with it unless
// both come from one [NewInterceptors] or [DialOptions].
func UnaryClientInterceptor(c *chain.Chain, opts ...Option) grpc.UnaryClientInterceptor {
	cfg, err := newConfig(c, append(opts[:len(opts):len(opts)], UnaryOnly()))
	if err != nil {
		return failUnary(err)
	}
	return cfg.unary()
}

// StreamClientInterceptor runs stream establishment through c: see the
// package documentation for what applies to streams. An invalid option,
// or a chain a stream cannot apply, makes every stream fail with its
// error; [NewInterceptors] reports it once instead.
func StreamClientInterceptor(c *chain.Chain, opts ...Option) grpc.StreamClientInterceptor {
	cfg, err := newConfig(c, opts)
	if err != nil {
		return failStream(err)
	}
	return cfg.stream()
}

// DialOptions returns the dial options that put c on a connection: both
// interceptors, sharing one configuration (one breaker per key for unary
// calls and streams alike), and grpc.WithDisableRetry. An invalid option
// makes every call fail with its error; a chain that streams cannot apply
// makes every stream fail with that error, unary calls running as usual.
// [NewInterceptors] reports both once instead.
func DialOptions(c *chain.Chain, opts ...Option) []grpc.DialOption {
	cfg, err := newConfig(c, append(opts[:len(opts):len(opts)], UnaryOnly()))
	if err != nil {
		return []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(failUnary(err)),
			grpc.WithChainStreamInterceptor(failStream(err)),
			grpc.WithDisableRetry(),
		}
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(cfg.unary()),
		grpc.WithChainStreamInterceptor(cfg.stream()),
		grpc.WithDisableRetry(),
	}
}

func failUnary(err error) grpc.UnaryClientInterceptor {
	return func(context.Context, string, any, any, *grpc.ClientConn, grpc.UnaryInvoker, ...grpc.CallOption) error {
		return err
	}
}

func failStream(err error) grpc.StreamClientInterceptor {
	return func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, grpc.Streamer, ...grpc.CallOption) (grpc.ClientStream, error) {
		return nil, err
	}
}

func passStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(ctx, desc, cc, method, opts...)
}

// prepared is a chain as the interceptors run it: what they derive from it
// once, when it is built.
type prepared struct {
	chain     *chain.Chain
	fallback  bool  // unary calls carry their reply for it (Reply)
	plan      plan  // for streams
	streamErr error // streams cannot apply the chain
}

func newConfig(c *chain.Chain, opts []Option) (*config, error) {
	cfg := &config{idempotent: map[string]bool{}, classify: DefaultClassify, bufMsgs: 16, bufBytes: 64 << 10}
	for _, o := range opts {
		if o == nil {
			return nil, errNilOption
		}
		o.apply(cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	src, err := keyed.NewSource("grpcmw", c, cfg.perKey, func(key string, c *chain.Chain) (*prepared, error) {
		p := &prepared{chain: c, fallback: adapter.HasFallback(c)}
		p.plan, p.streamErr = planFor(c)
		if p.streamErr != nil && cfg.perKey == nil && !cfg.unaryOnly {
			return nil, p.streamErr
		}
		adapter.Watch(c, key, cfg.onChange)
		return p, nil
	})
	if err != nil {
		return nil, err
	}
	cfg.source = src
	return cfg, nil
}

// chainFor returns the prepared chain for a call.
func (cfg *config) chainFor(ctx context.Context, method string, cc *grpc.ClientConn) (*prepared, error) {
	var key string
	if cfg.source.PerKey() {
		key = cfg.keyOf(ctx, method, cc)
	}
	return cfg.source.Get(key)
}
