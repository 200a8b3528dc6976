package grpcmw

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/internal/adapter"
	"github.com/callguard/callguard/internal/keyed"
	"github.com/callguard/callguard/internal/telemetry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// Interceptors are a unary and a stream client interceptor that share one
// configuration: one chain, or one chain per key, so that a target's unary
// calls and streams go through the same breakers. Create them with
// [NewInterceptors]; they are safe for concurrent use. The zero value's
// interceptors fail every call with an error that says so.
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
func (i *Interceptors) Unary() grpc.UnaryClientInterceptor {
	if i == nil || i.cfg == nil {
		return failUnary
	}
	return i.cfg.unary()
}

// Stream returns the stream client interceptor (with [UnaryOnly], one that
// passes streams through untouched). Install it with
// grpc.WithChainStreamInterceptor, or use [Interceptors.DialOptions].
func (i *Interceptors) Stream() grpc.StreamClientInterceptor {
	if i == nil || i.cfg == nil {
		return failStream
	}
	if i.cfg.unaryOnly {
		return passStream
	}
	return i.cfg.stream()
}

// DialOptions returns the dial options that put the interceptors on a
// connection: the unary one, the stream one (unless [UnaryOnly]), the
// stats handler of [JudgeFromHeader] if set, the load-balancing policy
// of [Endpoints] if set, and grpc.WithDisableRetry, so that grpc-go's own retry does not multiply the
// chain's attempts.
func (i *Interceptors) DialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithChainUnaryInterceptor(i.Unary())}
	if i == nil || i.cfg == nil || !i.cfg.unaryOnly {
		opts = append(opts, grpc.WithChainStreamInterceptor(i.Stream()))
	}
	if i != nil && i.cfg != nil && i.cfg.fromHeader {
		opts = append(opts, grpc.WithStatsHandler(i.StatsHandler()))
	}
	if i != nil && i.cfg != nil && i.cfg.endpoints != nil {
		opts = append(opts, i.cfg.endpoints.DialOption())
	}
	return append(opts, grpc.WithDisableRetry())
}

// StatsHandler returns the stats handler that [JudgeFromHeader] needs on
// the connection, which DialOptions adds; nil without JudgeFromHeader.
func (i *Interceptors) StatsHandler() stats.Handler {
	if i == nil || i.cfg == nil || !i.cfg.fromHeader {
		return nil
	}
	return headerSent{}
}

// Breakers lists the breakers of the interceptors' chains, with their key
// in a keyed set ("" for the single chain), state and counters now, by key.
func (i *Interceptors) Breakers() []breaker.Snapshot {
	if i == nil || i.cfg == nil {
		return nil
	}
	return adapter.Snapshots(func(fn func(string, *chain.Chain)) {
		i.cfg.source.Each(func(key string, p *prepared) { fn(key, p.chain) })
	})
}

// Keys returns the counts of the interceptors' keyed set ([PerMethod],
// [PerTarget], [PerKey]); zero without one.
func (i *Interceptors) Keys() KeyStats {
	if i == nil || i.cfg == nil {
		return KeyStats{}
	}
	return KeyStats(i.cfg.source.Stats())
}

// KeyStats are the counts of a keyed set of chains. At most maxKeys chains
// are kept. A new key that would exceed the bound evicts the least recently
// used key whose breakers are all closed with no failure counted against
// them, looking at the 8 least recently used at most, so that a call's cost
// does not grow with the number of keys. A key with a breaker open, half-open,
// or on its way to tripping is not evicted: an outage is not forgotten
// (a rebuilt chain would start closed and send the downstream a new round of
// failures), until nobody has asked for the key in longer than twice its
// breakers' longest open stay or window, and at least a minute: what they
// know is stale by then, and a key a client stopped asking for after a
// failure cannot hold its slot forever. When none of the keys looked at can
// go, the new key is not kept: its calls run through one overflow chain,
// built with the key "(overflow)" and shared by every such key, so that more
// failing keys than the bound still trip a breaker; Breakers lists its
// breakers under that key, and the metrics count its calls under it. Keep
// the bound above the number of keys that can fail at once.
type KeyStats struct {
	Kept       int    // chains kept now (the overflow chain not counted)
	Evicted    uint64 // chains evicted since the interceptors were made
	Overflowed uint64 // calls of keys that found no room, through the overflow chain
}

var errZeroInterceptors = errors.New("grpcmw: zero Interceptors; make them with grpcmw.NewInterceptors")

func failUnary(context.Context, string, any, any, *grpc.ClientConn, grpc.UnaryInvoker, ...grpc.CallOption) error {
	return errZeroInterceptors
}

func failStream(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, grpc.Streamer, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errZeroInterceptors
}

func passStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(ctx, desc, cc, method, opts...)
}

// prepared is a chain as the interceptors run it: what they derive from it
// once, when it is built.
type prepared struct {
	chain    *chain.Chain
	fallback bool // unary calls carry their reply for it (Reply)
	hedge    bool // unary attempts may run at once
	// ownReplies: every unary attempt fills a reply of its own, the
	// winner's copied to the caller's at the end: a fallback of the chain
	// may fill the caller's reply (Reply) while attempts run at once.
	ownReplies bool
	breakers   []*breaker.Breaker // an attempt while one is half-open is a probe
	// streams is the chain's plan for streams, made at the first stream
	// (at construction for a chain without a keyed set): the keys of a
	// keyed set that only see unary calls do not pay for it.
	streams atomic.Pointer[streamPlan]
}

// streamPlan is how streams apply a chain, or why they cannot.
type streamPlan struct {
	plan
	err error // streams cannot apply the chain
}

// streamPlan returns the plan of p's chain for streams, made once (two
// streams racing to make it make the same plan; one is kept).
func (p *prepared) streamPlan() *streamPlan {
	if sp := p.streams.Load(); sp != nil {
		return sp
	}
	sp := new(streamPlan)
	sp.plan, sp.err = planFor(p.chain)
	if !p.streams.CompareAndSwap(nil, sp) {
		return p.streams.Load()
	}
	return sp
}

func newConfig(c *chain.Chain, opts []Option) (*config, error) {
	cfg := &config{Problems: adapter.Problems{Pkg: "grpcmw"}, idempotent: map[string]bool{}, classify: DefaultClassify, bufMsgs: 16, bufBytes: 64 << 10, readyProbes: true}
	if err := adapter.Apply(&cfg.Problems, opts, func(o Option) { o.apply(cfg) }); err != nil {
		return nil, err
	}
	tel, err := telemetry.New("grpcmw", cfg.client, "rpc.method", cfg.meter, cfg.logger, func(fn func(string, *chain.Chain)) {
		cfg.source.Each(func(key string, p *prepared) { fn(key, p.chain) })
	})
	if err != nil {
		return nil, fmt.Errorf("grpcmw: Metrics: %w", err)
	}
	cfg.tel = tel
	if cfg.endpoints != nil {
		if err := tel.Endpoints(cfg.meter, cfg.endpoints.Statuses); err != nil {
			return nil, fmt.Errorf("grpcmw: Metrics: %w", err)
		}
	}
	if cfg.perKey != nil {
		cfg.perKey.OnEvict = tel.Evicted(cfg.onEvict)
	}
	src, err := keyed.NewSource("grpcmw", c, cfg.perKey, func(key string, c *chain.Chain) (*prepared, error) {
		p := &prepared{chain: c, fallback: adapter.HasFallback(c), hedge: adapter.HasHedge(c)}
		p.ownReplies = p.fallback && adapter.Concurrent(c)
		if cfg.readyProbes {
			// Native engines only: their state reads without a lock, and
			// each attempt reads it.
			for _, b := range adapter.Breakers(c) {
				if b.Settings().Engine == breaker.EngineNative {
					p.breakers = append(p.breakers, b)
				}
			}
		}
		if cfg.perKey == nil && !cfg.unaryOnly {
			if sp := p.streamPlan(); sp.err != nil {
				return nil, sp.err
			}
		}
		adapter.Watch(c, key, cfg.tel.Watcher(key, cfg.onChange))
		cfg.tel.Built(key, c)
		return p, nil
	})
	if err != nil {
		return nil, err
	}
	cfg.source = src
	return cfg, nil
}

// chainFor returns the prepared chain for a call.
func (cfg *config) chainFor(ctx context.Context, method string, cc *grpc.ClientConn) (*prepared, string, error) {
	var key string
	if cfg.source.PerKey() {
		key = cfg.keyOf(ctx, method, cc)
	}
	return cfg.source.GetKey(key)
}
