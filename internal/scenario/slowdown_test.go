package scenario

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestDelayKeepsCapacity: a Delay makes every answer later without
// holding a worker. A lone caller's p50 and p99 move by the Delay (within
// 10 %), and a saturating load still gets the capacity out of the
// downstream (within 3 %), as TestModelCalibration's healthy one does.
func TestDelayKeepsCapacity(t *testing.T) {
	const delay = 100 * time.Millisecond
	delayed := Model
	delayed.Fault = func(time.Duration) Fault { return Fault{Delay: delay} }
	synctest.Test(t, func(t *testing.T) {
		sim := delayed.Start()
		defer sim.Stop()
		var lat []time.Duration
		for range 5000 {
			t0 := time.Now()
			if err := sim.Call(context.Background()); err != nil {
				t.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		for _, q := range []struct {
			q    float64
			want time.Duration
		}{{0.5, Model.Median + delay}, {0.99, Model.P99 + delay}} {
			if got := quantile(lat, q.q); math.Abs(float64(got-q.want)) > 0.1*float64(q.want) {
				t.Errorf("latency p%v of a lone caller, answers %v later: got %v, want %v ± 10 %%", 100*q.q, delay, got, q.want)
			}
		}
	})
	synctest.Test(t, func(t *testing.T) {
		s := delayed
		s.Queue = 1000
		sim := s.Start()
		defer sim.Stop()
		start := time.Now()
		var wg sync.WaitGroup
		for range 60 {
			wg.Go(func() {
				for time.Since(start) < 100*time.Second {
					_ = sim.Call(context.Background())
				}
			})
		}
		wg.Wait()
		got := float64(sim.Stats().Answered) / time.Since(start).Seconds()
		if want := s.Capacity(); math.Abs(got-want) > 0.03*want {
			t.Errorf("throughput at saturation, answers %v later: got %.1f/s, want the capacity %.1f/s ± 3 %%", delay, got, want)
		}
	})
}

// TestLate: a share Late of the answers comes later by LateMin to LateMax;
// the others as usual.
func TestLate(t *testing.T) {
	s := Model
	s.Fault = func(time.Duration) Fault {
		return Fault{Late: 0.1, LateMin: 500 * time.Millisecond, LateMax: 800 * time.Millisecond}
	}
	synctest.Test(t, func(t *testing.T) {
		sim := s.Start()
		defer sim.Stop()
		const n = 10000
		late := 0
		var inTheGap int // answers that only lateness could put between 450 ms and 500 ms: none
		for range n {
			t0 := time.Now()
			if err := sim.Call(context.Background()); err != nil {
				t.Fatal(err)
			}
			switch d := time.Since(t0); {
			case d >= 500*time.Millisecond:
				late++
			case d >= 450*time.Millisecond:
				inTheGap++
			}
		}
		// A healthy answer takes 500 ms or more once in about 6,000 (the
		// lognormal's tail): the late ones are the rest.
		if got := float64(late) / n; math.Abs(got-0.1) > 0.01 {
			t.Errorf("%d of %d answers 500 ms or later: %.3f, want 0.1 ± 0.01", late, n, got)
		}
		if inTheGap > 5 {
			t.Errorf("%d answers between 450 and 500 ms, want about none", inTheGap)
		}
	})
}

// TestStall: an answer that arrives while the callers' host stalls is
// seen when the stall ends, never inside it; a caller's deadline still
// ends its wait on time.
func TestStall(t *testing.T) {
	var sc Scenario
	for _, s := range Scenarios {
		if s.Name == "client-stall" {
			sc = s
		}
	}
	if sc.Name == "" {
		t.Fatal("no scenario client-stall")
	}
	windows := sc.FaultWindows()
	if len(windows) != 15 {
		t.Fatalf("client-stall: %d stalls, want one every 2 s for 30 s: 15", len(windows))
	}
	for i, w := range windows {
		if want := 200*time.Millisecond + 50*time.Millisecond*time.Duration(i%3); w[1]-w[0] != want {
			t.Errorf("stall %d: %v long, want %v", i, w[1]-w[0], want)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		sim := Cell{Server: Model, Scenario: sc, Seed: 1}.start()
		defer sim.Stop()
		t0 := time.Now()
		seenAtAnEnd := 0
		for time.Since(t0) < sc.Start+sc.Length {
			if err := sim.Call(context.Background()); err != nil {
				t.Fatal(err)
			}
			at := time.Since(t0)
			for _, w := range windows {
				if at > w[0] && at < w[1] {
					t.Fatalf("an answer seen at %v, inside the stall %v–%v", at, w[0], w[1])
				}
				if at == w[1] {
					seenAtAnEnd++
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%d answers seen as a stall ended", seenAtAnEnd)
		if seenAtAnEnd < len(windows) {
			t.Errorf("%d answers seen as a stall ended, want at least one a stall (%d)", seenAtAnEnd, len(windows))
		}
	})
	synctest.Test(t, func(t *testing.T) {
		sim := Cell{Server: Model, Scenario: sc, Seed: 1}.start()
		defer sim.Stop()
		t0 := time.Now()
		time.Sleep(sc.Start + 10*time.Millisecond) // 190 ms of the first stall left
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := sim.Call(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a call with 50 ms left in a stall of 190 ms: %v, want its deadline", err)
		}
		if at := time.Since(t0) - sc.Start; at != 60*time.Millisecond {
			t.Errorf("it gave up %v into the fault, want 60ms: on time", at)
		}
	})
}

// TestScaledStall: a scaled scenario's stalls are scaled with its
// timeline, so that an answer waits no longer than its stall lasts; the
// answers' delays are not.
func TestScaledStall(t *testing.T) {
	for _, sc := range Slowdowns {
		tenth := sc.Scaled(0.1)
		for at := time.Duration(0); at < tenth.Length; at += time.Millisecond {
			f, g := tenth.Fault(at), sc.Fault(at*10)
			if f.Stall != g.Stall/10 || f.Delay != g.Delay {
				t.Fatalf("%s at %v scaled by 0.1: stall %v, delay %v; unscaled at %v: %v, %v", sc.Name, at, f.Stall, f.Delay, at*10, g.Stall, g.Delay)
			}
		}
	}
}
