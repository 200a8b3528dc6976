package grpcmw_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestTracing: a unary call whose first attempt fails Unavailable and
// whose retry succeeds is two attempt spans under the caller's, the second
// with grpc.previous-rpc-attempts 1 (gRFC A72's), and a callguard.retry
// event on the caller's span; read back through the SDK's recorder.
func TestTracing(t *testing.T) {
	rec, tp, _, client := tracedServer(t)
	ctx, span := tp.Tracer("test").Start(context.Background(), "caller")
	if err := check(ctx, client); err != nil {
		t.Fatal(err)
	}
	span.End()
	var attempts []sdktrace.ReadOnlySpan
	var caller sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "callguard.attempt":
			attempts = append(attempts, s)
		case "caller":
			caller = s
		}
	}
	if len(attempts) != 2 || caller == nil {
		t.Fatalf("%d attempt spans, caller %v; want 2 and the caller's", len(attempts), caller)
	}
	for i, a := range attempts {
		prev, set := int64(-1), false
		for _, kv := range a.Attributes() {
			if kv.Key == "grpc.previous-rpc-attempts" {
				prev, set = kv.Value.AsInt64(), true
			}
		}
		if a.Parent().SpanID() != caller.SpanContext().SpanID() || (i == 0) == set || (set && prev != 1) {
			t.Errorf("attempt %d: parent %v (caller %v), grpc.previous-rpc-attempts %d (set %t)", i+1, a.Parent().SpanID(), caller.SpanContext().SpanID(), prev, set)
		}
	}
	if ev := caller.Events(); len(ev) != 1 || ev[0].Name != "callguard.retry" {
		t.Errorf("caller's events %v, want one callguard.retry", ev)
	}
}

// TestTracingStreams: a Watch stream whose first attempt fails
// Unavailable before any message and whose retry delivers its 3 messages
// is two attempt spans under the caller's, the first with an error status,
// the second with grpc.previous-rpc-attempts 1, and a callguard.retry
// event on the caller's span; a stream the breaker refuses is no attempt
// span, and the caller's span carries callguard.rejected.
func TestTracingStreams(t *testing.T) {
	rec, tp, b, client := tracedServer(t)
	ctx, span := tp.Tracer("test").Start(context.Background(), "caller")
	w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := w.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	span.End()
	b.ForceOpen()
	rctx, rspan := tp.Tracer("test").Start(context.Background(), "refused")
	if _, err := client.Watch(rctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("a stream through an open breaker was established")
	}
	rspan.End()

	var attempts []sdktrace.ReadOnlySpan
	var caller, refused sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "callguard.attempt":
			attempts = append(attempts, s)
		case "caller":
			caller = s
		case "refused":
			refused = s
		}
	}
	if len(attempts) != 2 || caller == nil || refused == nil {
		t.Fatalf("%d attempt spans, caller %v, refused %v; want 2 and both callers'", len(attempts), caller, refused)
	}
	for i, a := range attempts {
		prev := int64(-1)
		for _, kv := range a.Attributes() {
			if kv.Key == "grpc.previous-rpc-attempts" {
				prev = kv.Value.AsInt64()
			}
		}
		wantPrev := int64(-1) // not set on the first attempt
		if i > 0 {
			wantPrev = int64(i)
		}
		failed := a.Status().Code == otelcodes.Error
		if a.Parent().SpanID() != caller.SpanContext().SpanID() || prev != wantPrev || failed != (i == 0) {
			t.Errorf("attempt %d: parent %v (caller %v), grpc.previous-rpc-attempts %d, failed %t", i+1, a.Parent().SpanID(), caller.SpanContext().SpanID(), prev, failed)
		}
	}
	if ev := caller.Events(); len(ev) != 1 || ev[0].Name != "callguard.retry" {
		t.Errorf("caller's events %v, want one callguard.retry", ev)
	}
	if ev := refused.Events(); len(ev) != 1 || ev[0].Name != "callguard.rejected" {
		t.Errorf("the refused stream's caller's events %v, want one callguard.rejected", ev)
	}
}

// tracedServer is a server whose first call fails Unavailable and the
// rest succeed, and a client through retry(3) → breaker → timeout traced
// into rec.
func tracedServer(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider, *breaker.Breaker, healthpb.HealthClient) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: time.Hour}))
	c := must(chain.New(must(retry.New(retry.MaxAttempts(3), retry.Constant(0))), b, must(timeout.New(time.Second))))
	_, client := server(t, func(n int64, _ string) testserver.GRPCAnswer {
		if n == 1 {
			return testserver.GRPCAnswer{Code: codes.Unavailable}
		}
		return testserver.GRPCAnswer{}
	}, must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent(), grpcmw.Tracing(tp))).DialOptions()...)
	return rec, tp, b, client
}
