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
		idempotent, maxAttempts := cfg.callSettings(method, callOpts)
		// Room for the trailer option, without touching the caller's slice.
		withTrailer := make([]grpc.CallOption, len(callOpts)+1)
		copy(withTrailer, callOpts)
		attempts := 0
		callerCtx := ctx
		err = ch.Do(ctx, func(ctx context.Context) error {
			attempts++
			var trailer metadata.MD
			withTrailer[len(callOpts)] = grpc.Trailer(&trailer)
			err := invoker(ctx, method, req, reply, cc, withTrailer...)
			return cfg.outcome(callerCtx, err, trailer, idempotent && (maxAttempts == 0 || attempts < maxAttempts))
		})
		return toStatus(ctx, err)
	}
}
