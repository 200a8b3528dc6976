package grpcmw

import (
	"context"

	"github.com/callguard/callguard/chain"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// UnaryClientInterceptor runs each unary call through c (or through the chain
// of its key, with [PerKey]). Install it with
// grpc.WithChainUnaryInterceptor, or use [DialOptions].
func UnaryClientInterceptor(c *chain.Chain, opts ...Option) grpc.UnaryClientInterceptor {
	cfg := newConfig(c, opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		ch, err := cfg.chainFor(ctx, method, cc)
		if err != nil {
			return err
		}
		u := &unaryCall{cfg: cfg, callerCtx: ctx, method: method, req: req, reply: reply, cc: cc, invoker: invoker, opts: callOpts}
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
		return toStatus(ctx, ch.Do(ctx, u.attempt))
	}
}

// unaryCall is one intercepted unary call: one allocation for its state,
// its attempts' call options (up to three of the caller's; more take a
// slice of their own) and the trailer they fill in.
type unaryCall struct {
	cfg         *config
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
}

// attempt makes one attempt of the call.
func (u *unaryCall) attempt(ctx context.Context) error {
	u.attempts++
	u.trailer = nil
	err := u.invoker(ctx, u.method, u.req, u.reply, u.cc, u.opts...)
	return u.cfg.outcome(u.callerCtx, u.cc, err, u.trailer, u.idempotent && (u.maxAttempts == 0 || u.attempts < u.maxAttempts))
}
