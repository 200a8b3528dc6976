package grpcmw

import (
	"context"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/telemetry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
)

// replyKey carries, under a chain with a fallback, the reply a fallback
// fills (see Reply).
type replyKey struct{}

// Reply returns the reply message of the unary call that ctx belongs to,
// for a fallback in the interceptor's chain to fill: a fallback that fills
// it and returns nil makes the call succeed with that reply. It returns nil
// outside such a call, and for streams, which a fallback cannot answer.
//
//	fb, _ := fallback.New(func(ctx context.Context, err error) error {
//		if r, ok := grpcmw.Reply(ctx).(*pb.Item); ok {
//			proto.Merge(r, cached)
//			return nil
//		}
//		return err
//	})
func Reply(ctx context.Context) any { return ctx.Value(replyKey{}) }

func (cfg *config) unary() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		p, key, err := cfg.chainFor(ctx, method, cc)
		if err != nil {
			return err
		}
		u := &unaryCall{cfg: cfg, p: p, callerCtx: ctx, method: method, req: req, reply: reply, cc: cc, invoker: invoker, opts: callOpts}
		idempotent, maxAttempts := cfg.callSettings(method, callOpts)
		u.maxAttempts = maxAttempts
		if idempotent {
			// Only a call that may be retried needs the trailer, for its
			// pushback. Room for the trailer option, without touching the
			// caller's slice.
			if len(callOpts) < len(u.buf) {
				u.opts = append(u.buf[:0], callOpts...)
			} else {
				u.opts = append(make([]grpc.CallOption, 0, len(callOpts)+1), callOpts...)
			}
			u.opts = append(u.opts, grpc.Trailer(&u.trailer))
			u.idempotent = true
		}
		cctx := ctx
		if p.fallback {
			cctx = context.WithValue(ctx, replyKey{}, reply)
		}
		err = toStatus(ctx, p.chain.Do(cctx, u.attempt), u.answer)
		if cfg.tel != nil {
			cfg.tel.Call(key, method, telemetry.Classify(ctx, err), u.attempts)
		}
		return err
	}
}

// unaryCall is one intercepted unary call: one allocation for its state,
// its attempts' call options (up to three of the caller's; more take a
// slice of their own) and the trailer they fill in.
type unaryCall struct {
	cfg         *config
	p           *prepared
	callerCtx   context.Context
	method      string
	req, reply  any
	cc          *grpc.ClientConn
	invoker     grpc.UnaryInvoker
	opts        []grpc.CallOption
	buf         [4]grpc.CallOption
	trailer     metadata.MD
	idempotent  bool
	maxAttempts int
	attempts    int
	answer      error // the last attempt's own error: the downstream's last answer
}

// attempt makes one attempt of the call.
func (u *unaryCall) attempt(ctx context.Context) error {
	u.attempts++
	u.trailer = nil
	opts := u.opts
	if _, bounded := ctx.Deadline(); bounded && u.probe() {
		// Only a probe with a deadline waits: one without would hold its
		// slot for the whole outage.
		opts = u.probeOptions()
	}
	err := u.invoker(ctx, u.method, u.req, u.reply, u.cc, opts...)
	u.answer = err
	return u.cfg.outcome(u.callerCtx, u.cc, u.req, u.opts, err, u.trailer, u.idempotent && (u.maxAttempts == 0 || u.attempts < u.maxAttempts))
}

// probe reports an attempt made while a breaker of the chain is half-open
// (with ProbesWaitForReady): the breaker admitted it as a probe.
func (u *unaryCall) probe() bool { return halfOpen(u.p.breakers) }

// halfOpen reports a breaker among bs that is half-open (for unary calls,
// bs holds the chain's native breakers only, whose state reads without a
// lock).
func halfOpen(bs []*breaker.Breaker) bool {
	for _, b := range bs {
		if b.State() == breaker.StateHalfOpen {
			return true
		}
	}
	return false
}

// probeOptions returns the call options of a probe: the call's, and
// WaitForReady, after telling a connection in TRANSIENT_FAILURE to
// reconnect at once.
func (u *unaryCall) probeOptions() []grpc.CallOption {
	if u.cc != nil && u.cc.GetState() == connectivity.TransientFailure {
		u.cc.ResetConnectBackoff()
	}
	return append(u.opts[:len(u.opts):len(u.opts)], grpc.WaitForReady(true))
}
