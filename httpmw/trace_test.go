package httpmw_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestTracing reads the spans back through the SDK's in-memory recorder:
// a request whose first attempt gets a 503 and whose retry succeeds is
// two attempt spans under the caller's, the second with
// http.request.resend_count 1, the first an error; the caller's span has
// the retry as an event and the attempts as an attribute; a request the
// open breaker refuses has no attempt span and a callguard.rejected
// event.
func TestTracing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	n := 0
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		n++
		status := 200
		if n == 1 {
			status = 503
		}
		return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
	b := must(breaker.New(breaker.Settings{Name: "catalog", ConsecutiveFailures: 5, OpenTimeout: time.Hour}))
	c := must(chain.New(must(retry.New(retry.MaxAttempts(3), retry.Constant(0))), b, must(timeout.New(time.Second))))
	tr := must(httpmw.New(base, c, httpmw.Tracing(tp)))
	get := func(name string) {
		ctx, span := tp.Tracer("test").Start(context.Background(), name)
		resp, err := tr.RoundTrip(must(http.NewRequestWithContext(ctx, http.MethodGet, "http://catalog.test/", nil)))
		if err == nil {
			_ = resp.Body.Close()
		}
		span.End()
	}
	get("retried")
	b.ForceOpen()
	get("refused")

	spans := rec.Ended()
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	attempts, callers := byName["callguard.attempt"], append(byName["retried"], byName["refused"]...)
	if len(attempts) != 2 || len(callers) != 2 {
		t.Fatalf("%d attempt spans, %d callers' spans; want 2 and 2 (spans: %v)", len(attempts), len(callers), byName)
	}
	retried, refused := callers[0], callers[1]
	for i, a := range attempts {
		if a.Parent().SpanID() != retried.SpanContext().SpanID() {
			t.Errorf("attempt %d: parent %v, want the caller's span %v", i+1, a.Parent().SpanID(), retried.SpanContext().SpanID())
		}
		attrs := attrMap(a.Attributes())
		if attrs["callguard.attempt"] != int64(i+1) || attrs["server.address"] != "catalog.test" || attrs["server.port"] != int64(80) {
			t.Errorf("attempt %d: attributes %v", i+1, attrs)
		}
		if resend, ok := attrs["http.request.resend_count"]; (i == 0) == ok || (ok && resend != int64(1)) {
			t.Errorf("attempt %d: http.request.resend_count %v (set %t), want it from the second attempt on, 1 there", i+1, resend, ok)
		}
	}
	if attempts[0].Status().Code.String() != "Error" || attempts[1].Status().Code.String() == "Error" {
		t.Errorf("attempt statuses %v, %v; want the 503 an error, the success not", attempts[0].Status(), attempts[1].Status())
	}
	if ev := eventNames(retried); len(ev) != 1 || ev[0] != "callguard.retry" {
		t.Errorf("the retried request's events %v, want [callguard.retry]", ev)
	}
	if attrs := attrMap(retried.Attributes()); attrs["callguard.attempts"] != int64(2) || attrs["callguard.outcome"] != "ok" {
		t.Errorf("the retried request's attributes %v, want 2 attempts, ok", attrs)
	}
	if ev := eventNames(refused); len(ev) != 1 || ev[0] != "callguard.rejected" {
		t.Errorf("the refused request's events %v, want [callguard.rejected]", ev)
	} else if by := attrMap(refused.Events()[0].Attributes)["callguard.rejected.by"]; by != "breaker" {
		t.Errorf("callguard.rejected.by %v, want breaker", by)
	} else if reason := attrMap(refused.Events()[0].Attributes)["callguard.reason"]; reason != "breaker_forced" {
		t.Errorf("callguard.reason %v, want breaker_forced (the breaker is forced open)", reason)
	}
}

func attrMap(kvs []attribute.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

func eventNames(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}
