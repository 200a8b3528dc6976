package telemetry

import (
	"fmt"
	"testing"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
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
