package telemetry

import (
	"context"
	"errors"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/throttle"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Tracing is the adapters' traces, through the OpenTelemetry trace API
// only: each attempt of a call is a span of its own, a child of the
// caller's span (the client span of an instrumentation beneath the chain,
// otelhttp's or otelgrpc's, is then the attempt's child), and what the
// chain does between attempts is an event on the caller's span.
type Tracing struct {
	tracer     trace.Tracer
	targetAttr string // "rpc.method" or "server.address"
	resendAttr string // the conventions' resend count: "http.request.resend_count" or "grpc.previous-rpc-attempts"
}

// NewTracing returns the tracing of an adapter, nil without tp.
func NewTracing(tp trace.TracerProvider, targetAttr, resendAttr string) *Tracing {
	if tp == nil {
		return nil
	}
	return &Tracing{tracer: tp.Tracer(ScopeName), targetAttr: targetAttr, resendAttr: resendAttr}
}

// Attempt starts the span of attempt n (from 1) of a call to target (a
// method, or a URL's host: server.address and server.port, defaultPort
// for a host without one, as in [T.Call]); alone
// is false for an attempt started beside another (a hedge). The attempt
// after the first is an event on the caller's span first: callguard.retry,
// or callguard.hedge. end ends the span with the attempt's error, failed
// (an error the chain judges a failure, a failing status) or not.
func (tr *Tracing) Attempt(ctx context.Context, target string, defaultPort, n int, alone bool) (context.Context, func(err error)) {
	if tr == nil {
		return ctx, func(error) {}
	}
	attempt := attribute.Int("callguard.attempt", n)
	if n > 1 {
		name := "callguard.retry"
		if !alone {
			name = "callguard.hedge"
		}
		trace.SpanFromContext(ctx).AddEvent(name, trace.WithAttributes(attempt))
	}
	attrs := targetAttrs(make([]attribute.KeyValue, 0, 5), tr.targetAttr, target, defaultPort)
	attrs = append(attrs, attempt, attribute.Bool("callguard.hedge", !alone))
	if n > 1 {
		attrs = append(attrs, attribute.Int(tr.resendAttr, n-1))
	}
	ctx, span := tr.tracer.Start(ctx, "callguard.attempt", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// Ended marks the caller's span with the call's end as the chain saw it:
// a rejection (a breaker open, a throttle, a limit or a bulkhead refusing
// the call, or a breaker ending the retries) is the event
// callguard.rejected with its reason, and every call says how many
// attempts it made.
func (tr *Tracing) Ended(ctx context.Context, outcome Outcome, attempts int, err error) {
	if tr == nil {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if outcome == Rejected {
		by := "limit"
		if errors.Is(err, breaker.ErrOpen) || err == nil {
			by = "breaker"
		}
		span.AddEvent("callguard.rejected", trace.WithAttributes(attribute.String("callguard.rejected.by", by), attribute.String("callguard.reason", RejectReason(err))))
	}
	span.SetAttributes(attribute.Int("callguard.attempts", attempts), attribute.String("callguard.outcome", string(outcome)))
}

// RejectReason is the callguard.reason of a rejection's event: a short,
// fixed value, not the error's text (which says which breaker, and for how
// long). breaker_open (a breaker refused, or it ended the retries: open
// beyond the next wait), breaker_probes (half-open, its probe quota used
// up), breaker_forced (forced open), throttled (a throttle), queue_full or
// max_wait (a limit or a bulkhead), rejected (any other local refusal, or
// one answered as a response, whose error is gone).
func RejectReason(err error) string {
	var open *breaker.OpenError
	var lim *limit.RejectedError
	switch {
	case errors.As(err, &open) && open.Forced:
		return "breaker_forced"
	case errors.As(err, &open) && open.Probes, errors.Is(err, breaker.ErrTooManyProbes):
		return "breaker_probes"
	case errors.Is(err, breaker.ErrOpen):
		return "breaker_open"
	case errors.Is(err, throttle.ErrThrottled):
		return "throttled"
	case errors.As(err, &lim) && lim.Reason == limit.ReasonQueueFull:
		return "queue_full"
	case errors.As(err, &lim) && lim.Reason == limit.ReasonMaxWait:
		return "max_wait"
	}
	return "rejected"
}
