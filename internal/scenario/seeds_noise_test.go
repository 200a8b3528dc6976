package scenario

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestNoiseProbeVirtual: in virtual time a timer fires exactly on time, so
// the probe measures no noise at all, one sample per period.
func TestNoiseProbeVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := StartNoise(2 * time.Millisecond)
		time.Sleep(101 * time.Millisecond)
		n := p.Take()
		if n.Samples != 50 || n.Max != 0 || n.P99 != 0 || n.Period != 2*time.Millisecond {
			t.Errorf("after 101 ms of virtual time: %+v; want 50 samples of a 2ms period, none late", n)
		}
		time.Sleep(10 * time.Millisecond)
		if n := p.Stop(); n.Samples != 5 {
			t.Errorf("Stop after 10 ms more: %d samples, want 5 (Take starts over)", n.Samples)
		}
		if n := p.Stop(); n.Samples != 0 {
			t.Errorf("a second Stop: %d samples, want 0", n.Samples)
		}
	}) // synctest.Test fails if the probe's goroutine outlives Stop
}

// TestNoiseProbeReal: in real time a timer is late by something, never by
// less than nothing, and the summary is ordered.
func TestNoiseProbeReal(t *testing.T) {
	p := StartNoise(0)
	time.Sleep(50 * time.Millisecond)
	n := p.Stop()
	if n.Period != time.Millisecond || n.Samples == 0 || n.Samples > 50 {
		t.Fatalf("50 ms of 1 ms timers: %+v; want 1 to 50 samples of a 1ms period", n)
	}
	if n.P50 < 0 || n.P50 > n.P99 || n.P99 > n.Max {
		t.Errorf("p50 %v, p99 %v, max %v: want 0 ≤ p50 ≤ p99 ≤ max", n.P50, n.P99, n.Max)
	}
}

func TestSummarize(t *testing.T) {
	late := make([]time.Duration, 0, 200)
	for i := 200; i > 0; i-- { // 200 ms down to 1 ms
		late = append(late, time.Duration(i)*time.Millisecond)
	}
	n := summarize(time.Millisecond, late)
	if n.Samples != 200 || n.P50 != 100*time.Millisecond || n.P99 != 198*time.Millisecond || n.Max != 200*time.Millisecond {
		t.Errorf("summarize(1..200 ms) = %+v; want 200 samples, p50 100ms, p99 198ms, max 200ms", n)
	}
	if n := summarize(time.Millisecond, nil); n.Samples != 0 || n.Max != 0 {
		t.Errorf("summarize(nothing) = %+v", n)
	}
}
