package httpmw_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// metrics collects reader's metrics into name → attributes → value.
func metrics(t *testing.T, reader *sdkmetric.ManualReader) map[string]map[attribute.Distinct]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[attribute.Distinct]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			vals := map[attribute.Distinct]float64{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					vals[p.Attributes.Equivalent()] += float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					vals[p.Attributes.Equivalent()] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					vals[p.Attributes.Equivalent()] = p.Value
				}
			}
			out[m.Name] = vals
		}
	}
	return out
}

func set(kv ...attribute.KeyValue) attribute.Distinct {
	s := attribute.NewSet(kv...)
	return s.Equivalent()
}

// TestMetricsAndLogs: the transport's metrics, read through the
// OpenTelemetry SDK, match what happened: 2 requests ok, one failed after
// 3 attempts (2 retries), which tripped the breaker, and the last request
// rejected; the breaker's state and counters, the timeout's value,
// the retries and the state change are there, and the open is logged at
// Warn.
func TestMetricsAndLogs(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	status := 200
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
	b := must(breaker.New(breaker.Settings{Name: "catalog", ConsecutiveFailures: 3, OpenTimeout: time.Hour}))
	c := must(chain.New(must(retry.New(retry.MaxAttempts(3), retry.Constant(0))), b,
		must(timeout.New(300*time.Millisecond, timeout.Latency(0.99, 100*time.Millisecond)))))
	tr := must(httpmw.New(base, c, httpmw.Metrics(mp), httpmw.Logger(logger), httpmw.Client("catalog-client")))
	get := func() {
		resp, err := tr.RoundTrip(must(http.NewRequest(http.MethodGet, "http://catalog.test/", nil)))
		if err == nil {
			_ = resp.Body.Close()
		}
	}
	get()
	get()
	status = 503
	get() // 3 attempts, all failed (the breaker opens on the third)
	get() // rejected before any attempt
	m := metrics(t, reader)
	host, port := attribute.String("server.address", "catalog.test"), attribute.Int("server.port", 80)
	cl := attribute.String("callguard.client", "catalog-client")
	for outcome, want := range map[string]float64{"ok": 2, "failed": 1, "rejected": 1} {
		if got := m["callguard.calls"][set(cl, host, port, attribute.String("callguard.outcome", outcome))]; got != want {
			t.Errorf("callguard.calls{outcome=%s} = %v, want %v", outcome, got, want)
		}
	}
	for outcome, want := range map[string]float64{"ok": 2, "failed": 3, "rejected": 0} { // the rejected call made none
		if got := m["callguard.attempts"][set(cl, host, port, attribute.String("callguard.outcome", outcome))]; got != want {
			t.Errorf("callguard.attempts{outcome=%s} = %v, want %v", outcome, got, want)
		}
	}
	name, idx := attribute.String("callguard.breaker.name", "catalog"), attribute.Int("callguard.policy.index", 1)
	checks := []struct {
		metric string
		attrs  attribute.Distinct
		want   float64
	}{
		{"callguard.breaker.state", set(cl, name, idx, attribute.String("callguard.breaker.override", "none")), 2},
		{"callguard.breaker.calls", set(cl, name, idx, attribute.String("callguard.outcome", "success")), 2},
		{"callguard.breaker.calls", set(cl, name, idx, attribute.String("callguard.outcome", "failure")), 3},
		{"callguard.breaker.rejections", set(cl, name, idx, attribute.String("callguard.reason", "open")), 1},
		{"callguard.breaker.transitions", set(cl, name, attribute.String("callguard.from", "closed"), attribute.String("callguard.to", "open")), 1},
		{"callguard.retry.retries", set(cl, attribute.Int("callguard.policy.index", 0)), 2},
		{"callguard.retry.exhausted", set(cl, attribute.Int("callguard.policy.index", 0), attribute.String("callguard.reason", "attempts_exhausted")), 1},
		{"callguard.timeout.value", set(cl, attribute.Int("callguard.policy.index", 2), attribute.Bool("callguard.timeout.adaptive", false)), 0.3},
	}
	for _, c := range checks {
		if got, ok := m[c.metric][c.attrs]; !ok || got != c.want {
			t.Errorf("%s = %v (reported %t), want %v; all: %v", c.metric, got, ok, c.want, m[c.metric])
		}
	}
	if !strings.Contains(logs.String(), `level=WARN msg="callguard: breaker open" client=catalog-client adapter=httpmw breaker=catalog from=closed to=open`) {
		t.Errorf("logs:\n%s\nwant the open at WARN", logs.String())
	}
}

// TestTwoClientsOneProvider: two transports reporting to one
// MeterProvider, neither named, keep their series apart: each policy's
// instruments carry the transport's callguard.client, so the two
// attempt timeouts are two data points (0.1 s and 0.7 s, not the last one
// read), and the retries of one are not summed with the other's.
func TestTwoClientsOneProvider(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	failing := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 503, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
	healthy := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
	newTransport := func(base http.RoundTripper, d time.Duration) *httpmw.Transport {
		c := must(chain.New(must(retry.New(retry.MaxAttempts(3), retry.Constant(0))), must(timeout.New(d))))
		return must(httpmw.New(base, c, httpmw.Metrics(mp)))
	}
	a, b := newTransport(failing, 100*time.Millisecond), newTransport(healthy, 700*time.Millisecond)
	for _, tr := range []*httpmw.Transport{a, b} {
		resp, err := tr.RoundTrip(must(http.NewRequest(http.MethodGet, "http://catalog.test/", nil)))
		if err == nil {
			_ = resp.Body.Close()
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	timeouts, retries := map[string]float64{}, map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[float64]:
				if m.Name == "callguard.timeout.value" {
					for _, p := range d.DataPoints {
						client, _ := p.Attributes.Value("callguard.client")
						timeouts[client.AsString()] = p.Value
					}
				}
			case metricdata.Sum[int64]:
				if m.Name == "callguard.retry.retries" {
					for _, p := range d.DataPoints {
						client, _ := p.Attributes.Value("callguard.client")
						retries[client.AsString()] += p.Value
					}
				}
			}
		}
	}
	if len(timeouts) != 2 || len(retries) != 2 {
		t.Fatalf("callguard.timeout.value %v, callguard.retry.retries %v: want two clients each", timeouts, retries)
	}
	var values []float64
	var counts []int64
	for client := range timeouts {
		values = append(values, timeouts[client])
		counts = append(counts, retries[client])
	}
	slices.Sort(values)
	slices.Sort(counts)
	if !slices.Equal(values, []float64{0.1, 0.7}) || !slices.Equal(counts, []int64{0, 2}) {
		t.Errorf("timeouts %v, retries %v by client; want 0.1 and 0.7 s, 0 and 2 retries", timeouts, retries)
	}
}
