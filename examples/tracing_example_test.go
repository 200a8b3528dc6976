package examples_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/preset"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Traces of a request through callguard with otelhttp beneath the chain:
// the server answers 503 twice, then 200. The caller's span holds one
// callguard.attempt span per attempt, each holding otelhttp's client span
// of what went on the wire; the retries are events on the caller's span.
// The spans are read back through the SDK's in-memory recorder (a real
// program gives the TracerProvider an exporter).
func Example_tracing() {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	// otelhttp beneath the chain: a client span per attempt.
	base := otelhttp.NewTransport(http.DefaultTransport, otelhttp.WithTracerProvider(tp))
	tr, err := httpmw.Standard(base, preset.Settings{Backoff: 5 * time.Millisecond, MaxBackoff: 5 * time.Millisecond}, httpmw.Tracing(tp))
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: tr}

	ctx, span := tp.Tracer("example").Start(context.Background(), "GET /catalog")
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := client.Do(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	span.End()

	printTree(rec.Ended(), "GET /catalog", "http.request.resend_count", "callguard.attempt", "callguard.attempts", "callguard.outcome", "http.response.status_code")
	// Output:
	// GET /catalog callguard.attempts=3 callguard.outcome=ok
	//   event callguard.retry callguard.attempt=2
	//   event callguard.retry callguard.attempt=3
	//   callguard.attempt callguard.attempt=1 [Error]
	//     event exception
	//     HTTP GET http.response.status_code=503 [Error]
	//   callguard.attempt http.request.resend_count=1 callguard.attempt=2 [Error]
	//     event exception
	//     HTTP GET http.response.status_code=503 [Error]
	//   callguard.attempt http.request.resend_count=2 callguard.attempt=3
	//     HTTP GET http.response.status_code=200
}

// printTree prints the spans under the root named root, children in the
// order they started, with the attributes named keys.
func printTree(spans []sdktrace.ReadOnlySpan, root string, keys ...string) {
	children := map[string][]sdktrace.ReadOnlySpan{}
	var top sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == root {
			top = s
		}
		children[s.Parent().SpanID().String()] = append(children[s.Parent().SpanID().String()], s)
	}
	var walk func(s sdktrace.ReadOnlySpan, depth int)
	walk = func(s sdktrace.ReadOnlySpan, depth int) {
		indent := strings.Repeat("  ", depth)
		line := indent + s.Name() + attrs(s.Attributes(), keys)
		if s.Status().Code.String() == "Error" {
			line += " [Error]"
		}
		fmt.Println(line)
		for _, e := range s.Events() {
			fmt.Println(indent + "  event " + e.Name + attrs(e.Attributes, keys))
		}
		kids := children[s.SpanContext().SpanID().String()]
		sort.Slice(kids, func(i, j int) bool { return kids[i].StartTime().Before(kids[j].StartTime()) })
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	if top != nil {
		walk(top, 0)
	}
}

func attrs(kvs []attribute.KeyValue, keys []string) string {
	var b strings.Builder
	for _, k := range keys {
		for _, kv := range kvs {
			if string(kv.Key) == k {
				fmt.Fprintf(&b, " %s=%v", k, kv.Value.AsInterface())
			}
		}
	}
	return b.String()
}
