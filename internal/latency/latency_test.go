package latency

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestBucketBounds: every latency lies in its bucket, whose bound is at
// most 12.5 % above it.
func TestBucketBounds(t *testing.T) {
	for d := time.Duration(1); d < time.Hour; d = d*9/8 + 1 {
		u := Upper(Bucket(d))
		if u < d || float64(u) > float64(d)*1.125+1 {
			t.Fatalf("Upper(Bucket(%v)) = %v; want within [d, 1.125 d]", d, u)
		}
	}
}

// TestQuantileAndForgetting: the p95 of 95 fast and 5 slow answers is a
// fast one, the p99 a slow one; a window later, nothing is left.
func TestQuantileAndForgetting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(6 * time.Second)
		var e int64
		for i := range 100 {
			d := 10 * time.Millisecond
			if i >= 95 {
				d = time.Second
			}
			e, _ = w.Record(d)
		}
		if q, ok := w.Quantile(e, 0.95, 100); !ok || q < 10*time.Millisecond || q > 12*time.Millisecond {
			t.Errorf("p95 = %v, %v; want about 10ms", q, ok)
		}
		if q, ok := w.Quantile(e, 0.99, 100); !ok || q < time.Second || q > 1125*time.Millisecond {
			t.Errorf("p99 = %v, %v; want about 1s", q, ok)
		}
		if _, ok := w.Quantile(e, 0.5, 101); ok {
			t.Error("a quantile with fewer samples than asked for")
		}
		time.Sleep(7 * time.Second)
		if _, ok := w.Quantile(w.Epoch(time.Now()), 0.5, 1); ok {
			t.Error("a quantile after the window passed with no record")
		}
	})
}
