package examples_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// A transport whose metrics go to Prometheus through the OpenTelemetry SDK:
// the kit's packages use only the OpenTelemetry metric API, so the
// application chooses the SDK and the exporter.
func Example_prometheus() {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		panic(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())

	r, _ := retry.New(retry.MaxAttempts(3), retry.Constant(0))
	b, _ := breaker.New(breaker.Settings{Name: "catalog", ConsecutiveFailures: 3})
	attempt, _ := timeout.New(300*time.Millisecond, timeout.Latency(0.99, 100*time.Millisecond))
	c, _ := chain.New(r, b, attempt)
	tr, err := httpmw.New(catalog{}, c, httpmw.Metrics(mp), httpmw.Client("catalog-client"))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}
	for _, path := range []string{"/items/1", "/items/2", "/down", "/items/3"} {
		if resp, err := client.Get("http://catalog.test" + path); err == nil {
			resp.Body.Close()
		}
	}

	// What Prometheus would scrape, the calls and the breaker's state.
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "callguard_calls_total") || strings.HasPrefix(line, "callguard_breaker_state") {
			fmt.Println(line)
		}
	}
	// Output:
	// callguard_breaker_state{callguard_breaker_name="catalog",callguard_breaker_override="none",callguard_client="catalog-client",callguard_policy_index="1"} 2
	// callguard_calls_total{callguard_client="catalog-client",callguard_outcome="failed",server_address="catalog.test",server_port="80"} 1
	// callguard_calls_total{callguard_client="catalog-client",callguard_outcome="ok",server_address="catalog.test",server_port="80"} 2
	// callguard_calls_total{callguard_client="catalog-client",callguard_outcome="rejected",server_address="catalog.test",server_port="80"} 1
}

// catalog answers 503 on /down, 200 otherwise.
type catalog struct{}

func (catalog) RoundTrip(r *http.Request) (*http.Response, error) {
	status := http.StatusOK
	if r.URL.Path == "/down" {
		status = http.StatusServiceUnavailable
	}
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}
