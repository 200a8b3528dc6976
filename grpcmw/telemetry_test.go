package grpcmw_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"
)

// TestMetricsAndLogs: the interceptors' metrics, read through the
// OpenTelemetry SDK, match what happened (2 calls ok, one failed after 3
// attempts and tripped the breaker, one rejected), per method; the lint's
// finding on the chain and the open are logged.
func TestMetricsAndLogs(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	var failing atomic.Bool
	b := must(breaker.New(breaker.Settings{Name: "health", ConsecutiveFailures: 3, OpenTimeout: time.Hour}))
	c := must(chain.New(must(retry.New(retry.MaxAttempts(3), retry.Constant(0))), b, must(timeout.New(time.Second))))
	_, client := server(t, func(int64, string) testserver.GRPCAnswer {
		if failing.Load() {
			return testserver.GRPCAnswer{Code: codes.Unavailable}
		}
		return testserver.GRPCAnswer{}
	}, must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent(), grpcmw.Metrics(mp), grpcmw.Logger(logger), grpcmw.Client("health-client"))).DialOptions()...)
	_ = check(context.Background(), client)
	_ = check(context.Background(), client)
	failing.Store(true)
	_ = check(context.Background(), client)
	_ = check(context.Background(), client)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "callguard.calls" {
				for _, p := range sum.DataPoints {
					method, _ := p.Attributes.Value(attribute.Key("rpc.method"))
					outcome, _ := p.Attributes.Value(attribute.Key("callguard.outcome"))
					got[method.AsString()+" "+outcome.AsString()] += p.Value
				}
			}
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "callguard.breaker.state" {
				if len(g.DataPoints) != 1 || g.DataPoints[0].Value != 2 {
					t.Errorf("callguard.breaker.state = %+v, want one breaker, open (2)", g.DataPoints)
				}
			}
		}
	}
	const m = "/grpc.health.v1.Health/Check"
	if want := map[string]int64{m + " ok": 2, m + " failed": 1, m + " rejected": 1}; len(got) != 3 || got[m+" ok"] != 2 || got[m+" failed"] != 1 || got[m+" rejected"] != 1 {
		t.Errorf("callguard.calls = %v, want %v", got, want)
	}
	for _, want := range []string{`level=INFO msg="callguard: lint CG015" client=health-client adapter=grpcmw`, `level=WARN msg="callguard: breaker open" client=health-client adapter=grpcmw breaker=health from=closed to=open`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs:\n%s\nwant %s", logs.String(), want)
		}
	}
}
