package grpcmw_test

import (
	"context"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// cannedInvoker answers every unary call in memory, filling in a requested
// trailer as grpc-go does (with a copy of the stream's trailer), so that
// BenchmarkUnary measures what the interceptor itself adds to a call; bench/
// measures it on a real loopback call.
func cannedInvoker(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
	for _, o := range opts {
		if t, ok := o.(grpc.TrailerCallOption); ok {
			*t.TrailerAddr = metadata.MD{}
		}
	}
	return nil
}

// BenchmarkUnary is one successful unary call through the interceptor of
// NewInterceptors with an in-memory invoker, against the invoker
// alone (impl=base) and with a 1 s context.WithTimeout per call
// (impl=base-deadline). Compare with
//
//	benchstat -col /impl out.txt
func BenchmarkUnary(b *testing.B) {
	newChain := func(b *testing.B, withTimeout bool) *chain.Chain {
		r := must(retry.New(retry.MaxAttempts(3), retry.Constant(10*time.Millisecond)))
		ps := []chain.Policy{r, must(breaker.New(breaker.Settings{ConsecutiveFailures: 5}))}
		if withTimeout {
			ps = append(ps, must(timeout.New(time.Second)))
		}
		return must(chain.New(ps...))
	}
	direct := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	withDeadline := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	impls := []struct {
		name string
		icpt func(b *testing.B) grpc.UnaryClientInterceptor
	}{
		{"base", func(*testing.B) grpc.UnaryClientInterceptor { return direct }},
		{"base-deadline", func(*testing.B) grpc.UnaryClientInterceptor { return withDeadline }},
		{"callguard-no-timeout", func(b *testing.B) grpc.UnaryClientInterceptor {
			return must(grpcmw.NewInterceptors(newChain(b, false), grpcmw.AllIdempotent(), grpcmw.UnaryOnly())).Unary()
		}},
		{"callguard", func(b *testing.B) grpc.UnaryClientInterceptor {
			return must(grpcmw.NewInterceptors(newChain(b, true), grpcmw.AllIdempotent(), grpcmw.UnaryOnly())).Unary()
		}},
		// JudgeFromHeader: each attempt carries a record of when its header
		// went out (the in-memory invoker emits no stats events; what
		// grpc-go adds for a stats handler is measured in bench/, over
		// loopback).
		{"callguard-judge-from-header", func(b *testing.B) grpc.UnaryClientInterceptor {
			return must(grpcmw.NewInterceptors(newChain(b, true), grpcmw.AllIdempotent(), grpcmw.UnaryOnly(), grpcmw.JudgeFromHeader())).Unary()
		}},
		// With metrics on, to an OpenTelemetry SDK meter provider (read by
		// a manual reader: what is measured is the recording).
		{"callguard-metrics", func(b *testing.B) grpc.UnaryClientInterceptor {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			return must(grpcmw.NewInterceptors(newChain(b, true), grpcmw.AllIdempotent(), grpcmw.UnaryOnly(), grpcmw.Metrics(mp))).Unary()
		}},
	}
	for _, im := range impls {
		b.Run("impl="+im.name, func(b *testing.B) {
			icpt := im.icpt(b)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := icpt(ctx, "/grpc.health.v1.Health/Check", nil, nil, nil, cannedInvoker); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
