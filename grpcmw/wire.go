package grpcmw

import (
	"context"

	att "github.com/callguard/callguard/internal/attempt"
	"google.golang.org/grpc/stats"
)

// wireKey carries, with JudgeFromHeader, an attempt's *att.Wire to the
// stats handler, which marks when the attempt's header went out.
type wireKey struct{}

// headerSent is the stats handler of JudgeFromHeader. On the attempt's
// context, grpc-go emits a client's stats.DelayedPickComplete when a call
// that waited for a ready transport (a channel CONNECTING: a connection
// being made) gets one, and stats.OutHeader once the call has its stream
// (after any wait for stream quota) and its header is queued to be
// written.
type headerSent struct{}

func (headerSent) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (headerSent) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (headerSent) HandleConn(context.Context, stats.ConnStats) {}

func (headerSent) HandleRPC(ctx context.Context, s stats.RPCStats) {
	switch s := s.(type) {
	case *stats.OutHeader:
		if w, ok := ctx.Value(wireKey{}).(*att.Wire); ok && s.Client {
			w.Reached()
		}
	case *stats.DelayedPickComplete:
		if w, ok := ctx.Value(wireKey{}).(*att.Wire); ok {
			w.Connected()
		}
	}
}
