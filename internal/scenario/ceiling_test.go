package scenario

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestCeiling checks the ceiling of each kind of fault against the
// arithmetic done by hand.
func TestCeiling(t *testing.T) {
	byName := map[string]Scenario{}
	for _, sc := range Scenarios {
		byName[sc.Name] = sc
	}
	open, closed := Loads[0], Loads[1]
	rate, capacity := open.Rate, Model.Capacity()
	cheap := Model
	cheap.ErrorCost = 2 * time.Millisecond
	// The ramp: errors e falling linearly from 1 to 0 over 20 s, a success
	// costing S / (1 − e) of worker time (every error costs S), so the
	// downstream gives capacity × (1 − e) successes a second; with errors
	// at 2 ms, capacity' = Workers × (1 − e) / ((1 − e) S + e × 2 ms).
	ramp := func(srv Server) float64 {
		var sum float64
		const n = 200000
		for k := range n {
			e := 1 - (float64(k)+0.5)/n
			s := srv.MeanService().Seconds()
			cost := s
			if srv.ErrorCost > 0 {
				cost = srv.ErrorCost.Seconds()
			}
			sum += min(rate, float64(srv.Workers)*(1-e)/((1-e)*s+e*cost)) * 20.0 / n
		}
		return sum + rate*30
	}
	for _, c := range []struct {
		srv      Server
		scenario string
		load     Load
		want     float64
	}{
		{Model, "outage", open, rate * (30 + 1)},    // healthy for the last 30 s, and the deadline before it
		{Model, "blackhole", open, rate * (30 + 1)}, // the same
		{Model, "hang20", open, rate * 60},          // every request, retried past its hang
		{Model, "capacity30-shallow", open, 0.3*capacity*30 + rate*30},
		{Model, "flapping", open, rate * (5*3 + 25 + 4)}, // up 5 s three times, then 25 s; four heals
		{Model, "outage", closed, 200*30 + 20},           // 20 callers once every 100 ms; one request each across the heal
		{Model, "capacity30-deep", closed, 0.3*capacity*30 + 200*30},
		{Model, "ramp", open, ramp(Model)},
		{cheap, "ramp", open, ramp(cheap)},
		// The slowdowns: the downstream gives every request; a closed
		// loop's caller makes at most one a Delay once the Delay is past
		// its pace.
		{Model, "delay100", open, rate * 60},
		{Model, "delay100", closed, 200 * 60},                                             // a Delay of one pace
		{Model, "delay200", closed, 100*30 + 200*30},                                      // one request every 200 ms during the fault
		{Model, "delay-ramp", closed, 200*10 + 2000*(harmonic(30)-harmonic(10)) + 200*30}, // 20 / (10 ms × k) in its k-th second, from k = 11
		{Model, "bimodal10", closed, 200 * 60},                                            // the late answers not counted
		{Model, "client-stall", open, rate * 60},                                          // the stalls are the callers' own
	} {
		got := Ceiling(c.srv, byName[c.scenario], c.load)
		if math.Abs(got-c.want) > 0.002*c.want+1 {
			t.Errorf("%s/%s (error cost %v): ceiling %.0f, want %.0f", c.scenario, c.load.Name, c.srv.ErrorCost, got, c.want)
		}
	}
	if a, b := Ceiling(Model, byName["ramp"], open), Ceiling(cheap, byName["ramp"], open); b <= a {
		t.Errorf("ramp: errors at 2 ms give a ceiling of %.0f, at the service time %.0f: want more when errors are cheap", b, a)
	}
}

// TestErrorCost: with ErrorCost, a failing downstream serves its errors at
// Workers / ErrorCost a second, whatever its service times; without, at
// its capacity.
func TestErrorCost(t *testing.T) {
	for _, c := range []struct {
		cost time.Duration
		want float64
	}{{0, Model.Capacity()}, {2 * time.Millisecond, float64(Model.Workers) / 0.002}} {
		synctest.Test(t, func(t *testing.T) {
			s := Model
			s.Queue, s.ErrorCost = 1000, c.cost
			s.Fault = func(time.Duration) Fault { return Fault{Errors: 1} }
			sim := s.Start()
			defer sim.Stop()
			start := time.Now()
			var wg sync.WaitGroup
			for range 60 {
				wg.Go(func() {
					for time.Since(start) < 100*time.Second {
						if err := sim.Call(context.Background()); !errors.Is(err, ErrFailed) {
							t.Errorf("call: %v, want ErrFailed", err)
							return
						}
					}
				})
			}
			wg.Wait()
			got := float64(sim.Stats().Served) / time.Since(start).Seconds()
			if math.Abs(got-c.want) > 0.03*c.want {
				t.Errorf("error cost %v: %.0f errors a second, want %.0f ± 3 %%", c.cost, got, c.want)
			}
		})
	}
}

// harmonic is 1 + 1/2 + … + 1/n.
func harmonic(n int) float64 {
	var h float64
	for k := 1; k <= n; k++ {
		h += 1 / float64(k)
	}
	return h
}
