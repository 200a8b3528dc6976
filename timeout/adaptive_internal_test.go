package timeout

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestQuantileRank: the q-quantile is the smallest latency with at least q
// of the samples at or below it, so one slow call in 600 is p99.9's
// (599/600 is 99.83 %), and one in 10 is p94's.
func TestQuantileRank(t *testing.T) {
	for _, tc := range []struct {
		q    float64
		fast int
	}{{0.999, 599}, {0.94, 9}} {
		synctest.Test(t, func(t *testing.T) {
			tr, err := newTracker(time.Second, AdaptiveOptions{Quantile: tc.q, Multiplier: 1, Min: 1, Max: time.Hour, MinSamples: 1})
			if err != nil {
				t.Fatal(err)
			}
			for range tc.fast {
				tr.record(time.Millisecond)
			}
			tr.record(100 * time.Millisecond)
			tr.recompute(tr.epoch(time.Now()))
			if got := tr.current(); got < 100*time.Millisecond {
				t.Errorf("p%v of %d × 1ms and 1 × 100ms = %v, want ≥ 100ms", 100*tc.q, tc.fast, got)
			}
		})
	}
	// And not above it: p90 of 9 fast calls and a slow one is a fast call.
	synctest.Test(t, func(t *testing.T) {
		tr, _ := newTracker(time.Second, AdaptiveOptions{Quantile: 0.9, Multiplier: 1, Min: 1, Max: time.Hour, MinSamples: 1})
		for range 9 {
			tr.record(time.Millisecond)
		}
		tr.record(100 * time.Millisecond)
		tr.recompute(tr.epoch(time.Now()))
		if got := tr.current(); got >= 100*time.Millisecond {
			t.Errorf("p90 of 9 × 1ms and 1 × 100ms = %v, want about 1ms", got)
		}
	})
}

// BenchmarkRecord: recording a call is O(1) and allocates nothing, on one
// goroutine and on all.
func BenchmarkRecord(b *testing.B) {
	tr, err := newTracker(100*time.Millisecond, AdaptiveOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			tr.record(time.Duration(i%1000) * time.Microsecond)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				tr.record(time.Duration(i%1000) * time.Microsecond)
			}
		})
	})
}
