//go:build linux

package httpmw_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/preset"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestEndpointsMetrics: under Standard with Metrics, an Endpoints base's
// ejection shows as callguard.endpoint.ejected and .ejections for its
// address, with the host as callguard.service.
func TestEndpointsMetrics(t *testing.T) {
	b := newBackends(t, false)
	const bad = 2
	b.answer[bad].Store(answer503)
	eps := newEndpoints(t, longEjection(), httpmw.Resolver(fixed(b.addrs, new(atomic.Int64))))
	reader := sdkmetric.NewManualReader()
	tr, err := httpmw.Standard(eps, preset.Settings{}, httpmw.Metrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	if got := send(t, tr, b.url(), 200, "", 0); got[200] != 200 {
		t.Errorf("GETs through Standard: %v, want 200 OK each (retried elsewhere)", got)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]int64{} // instrument → address → value
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var points []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				points = d.DataPoints
			case metricdata.Sum[int64]:
				points = d.DataPoints
			}
			for _, p := range points {
				addr, _ := p.Attributes.Value("server.address")
				svc, _ := p.Attributes.Value("callguard.service")
				if svc.AsString() != backendsHost {
					continue
				}
				if got[m.Name] == nil {
					got[m.Name] = map[string]int64{}
				}
				got[m.Name][addr.AsString()] += p.Value
			}
		}
	}
	for _, name := range []string{"callguard.endpoint.ejected", "callguard.endpoint.ejections"} {
		if len(got[name]) != 10 || got[name][b.addrs[bad]] != 1 {
			t.Errorf("%s by address = %v, want 10 addresses, %s at 1", name, got[name], b.addrs[bad])
		}
	}
}
