package telemetry

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestSeriesBounded: calls of ever new keys and targets (hosts a client
// chooses, keys long evicted) stop making new series at maxSets: they are
// counted under "(other)", and none is lost.
func TestSeriesBounded(t *testing.T) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tel, err := New("httpmw", "test", "server.address", mp, nil, func(func(string, *chain.Chain)) {})
	if err != nil {
		t.Fatal(err)
	}
	const calls = maxSets + 1000
	for i := range calls {
		tel.Call(fmt.Sprint("key", i), fmt.Sprint("host", i, ".test"), 80, OK, 1)
	}
	var total int64
	for _, c := range tel.sets {
		total += c.n.Load()
	}
	other := tel.sets[callKey{"(other)", "(other)", 0, OK}]
	if len(tel.sets) > maxSets+1 || total != calls || other == nil || other.n.Load() != calls-maxSets {
		t.Errorf("%d attribute sets for %d calls (%d counted, %v under (other)); want at most %d sets, every call counted", len(tel.sets), calls, total, other, maxSets+1)
	}
}

// TestClassifyRejected: a local rejection (a throttle's, a limit's, a
// bulkhead's) is counted rejected, as a breaker's is.
func TestClassifyRejected(t *testing.T) {
	ctx := t.Context()
	if got := Classify(ctx, fmt.Errorf("wrapped: %w", callguard.ErrRejected)); got != Rejected {
		t.Errorf("Classify(ErrRejected) = %v; want %v", got, Rejected)
	}
	if got := Classify(ctx, breaker.ErrOpen); got != Rejected {
		t.Errorf("Classify(ErrOpen) = %v; want %v", got, Rejected)
	}
	if got := Classify(ctx, fmt.Errorf("down")); got != Failed {
		t.Errorf("Classify(an answer) = %v; want %v", got, Failed)
	}
}

// TestNoEmptyAttributes: an unnamed breaker in a chain outside a keyed set
// reports no callguard.breaker.name and no callguard.key on any series, and
// its state changes are logged without key= and breaker=: an attribute
// with no value is left out, never set to "".
func TestNoEmptyAttributes(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var logs bytes.Buffer
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1}))
	c := must(chain.New(must(retry.New(retry.MaxAttempts(2), retry.Constant(0))), b, must(timeout.New(time.Second))))
	tel, err := New("httpmw", "test", "server.address", mp, slog.New(slog.NewTextHandler(&logs, nil)), func(fn func(string, *chain.Chain)) { fn("", c) })
	if err != nil {
		t.Fatal(err)
	}
	tel.Built("", c)
	tel.Call("", "catalog.test", 80, OK, 1)
	tel.Watcher("", nil)(breaker.StateChange{From: breaker.StateClosed, To: breaker.StateOpen})
	tel.Evicted(nil)("")
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	check := func(name string, attrs attribute.Set) {
		seen[name] = true
		for _, kv := range attrs.ToSlice() {
			if kv.Value.Type() == attribute.STRING && kv.Value.AsString() == "" {
				t.Errorf("%s: %s is empty (%s)", name, kv.Key, attrs.Encoded(attribute.DefaultEncoder()))
			}
			if kv.Key == "callguard.key" || kv.Key == "callguard.breaker.name" {
				t.Errorf("%s: %s set (%s)", name, kv.Key, attrs.Encoded(attribute.DefaultEncoder()))
			}
		}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					check(m.Name, p.Attributes)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					check(m.Name, p.Attributes)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					check(m.Name, p.Attributes)
				}
			}
		}
	}
	for _, name := range []string{"callguard.calls", "callguard.breaker.state", "callguard.breaker.transitions", "callguard.timeout.value", "callguard.retry.retries", "callguard.keys.evictions"} {
		if !seen[name] {
			t.Errorf("%s not reported", name)
		}
	}
	out := logs.String()
	if !strings.Contains(out, `msg="callguard: breaker open" client=test adapter=httpmw from=closed to=open`) || strings.Contains(out, `=""`) || strings.Contains(out, " key=") || strings.Contains(out, " breaker=") {
		t.Errorf("logs:\n%s\nwant no empty attribute, no key= nor breaker=", out)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
