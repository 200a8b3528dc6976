package scenario

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestModelCalibration pins the model: a saturating load gets the capacity
// Workers / MeanService out of it (within 3 %), and a lone caller sees the
// lognormal's median and 99th percentile as its latency (within 10 %).
func TestModelCalibration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := Model
		s.Queue = 1000
		sim := s.Start()
		defer sim.Stop()
		done := make(chan struct{})
		const callers = 60
		start := time.Now()
		for range callers {
			go func() {
				defer func() { done <- struct{}{} }()
				for time.Since(start) < 100*time.Second {
					_ = sim.Call(context.Background())
				}
			}()
		}
		for range callers {
			<-done
		}
		got := float64(sim.Stats().Answered) / time.Since(start).Seconds()
		if want := s.Capacity(); math.Abs(got-want) > 0.03*want {
			t.Errorf("throughput at saturation: got %.1f/s, want %.1f/s (10 workers / %v) ± 3 %%", got, want, s.MeanService())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		sim := Model.Start()
		defer sim.Stop()
		var lat []time.Duration
		for range 20000 {
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
		}{{0.5, Model.Median}, {0.99, Model.P99}} {
			if got := quantile(lat, q.q); math.Abs(float64(got-q.want)) > 0.1*float64(q.want) {
				t.Errorf("latency p%v of a lone caller: got %v, want %v ± 10 %%", 100*q.q, got, q.want)
			}
		}
	})
}

// TestRunNone runs each scenario with no protection, once, and checks what
// a run must measure whatever the stack: the warm-up's goodput is the
// offered load, nothing is rejected without reaching the downstream, one
// call per request.
func TestRunNone(t *testing.T) {
	for _, sc := range Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				res, err := Run(Cell{Server: Model, Scenario: sc, Load: Loads[0], Seed: 1}, None)
				if err != nil {
					t.Fatal(err)
				}
				rate := Loads[0].Rate
				if math.Abs(res.Baseline-rate) > 0.1*rate {
					t.Errorf("warm-up goodput: got %.1f/s, want the offered %.1f/s ± 10 %%", res.Baseline, rate)
				}
				if res.Detect != -1 || res.Refused != 0 || res.Amplification != 1 {
					t.Errorf("detect %v, %d refused, amplification %.2f; want none, 0 and 1", res.Detect, res.Refused, res.Amplification)
				}
				t.Logf("%s: %d successes of %d, fault %.1f/s, after %.1f/s, p50 %v p99 %v, recover %v, wasted %v, queue %.1f (max %d), metastable %t",
					sc.Name, res.Successes, res.Requests, res.GoodputFault, res.GoodputAfter, res.P50, res.P99, res.Recover, res.Wasted, res.QueueMean, res.QueueMax, res.Metastable)
			})
		})
	}
}

// TestScaledThroughNetwork runs the outage with its timeline a quarter as
// long, each call through a Network: the recovery and the timeline are in
// the scaled units, and every call the stack made went through the network
// to the server.
func TestScaledThroughNetwork(t *testing.T) {
	sc := Scenarios[0]
	synctest.Test(t, func(t *testing.T) {
		full, err := Run(Cell{Server: Model, Scenario: sc, Load: Loads[0], Seed: 1}, None)
		if err != nil {
			t.Fatal(err)
		}
		var through atomic.Int64
		network := func(server func(context.Context) error) (func(context.Context) error, func(), error) {
			return func(ctx context.Context) error { through.Add(1); return server(ctx) }, func() {}, nil
		}
		quarter, err := Run(Cell{Server: Model, Scenario: sc.Scaled(0.25), Load: Loads[0], Seed: 1, Network: network}, None)
		if err != nil {
			t.Fatal(err)
		}
		if want := full.Recover / 4; quarter.Recover != want {
			t.Errorf("recovered after %v scaled by ¼, want %v (unscaled %v)", quarter.Recover, want, full.Recover)
		}
		if len(quarter.Timeline) != len(full.Timeline) {
			t.Errorf("%d timeline buckets scaled, %d unscaled; want the same", len(quarter.Timeline), len(full.Timeline))
		}
		if n := int(through.Load()); n == 0 || n != quarter.Server.Received {
			t.Errorf("%d calls through the network, the server received %d; want equal and > 0", n, quarter.Server.Received)
		}
		if r := float64(quarter.Requests) / float64(full.Requests); math.Abs(r-0.25) > 0.03 {
			t.Errorf("%d requests scaled, %d unscaled: ratio %.3f, want 0.25", quarter.Requests, full.Requests, r)
		}
	})
}

// TestFaultWindows checks the windows the timelines shade: one for a
// steady fault, four for the flapping downstream, scaled with the scenario.
func TestFaultWindows(t *testing.T) {
	byName := map[string]Scenario{}
	for _, sc := range Scenarios {
		byName[sc.Name] = sc
	}
	s := time.Second
	for _, c := range []struct {
		sc   Scenario
		want [][2]time.Duration
	}{
		{byName["outage"], [][2]time.Duration{{20 * s, 50 * s}}},
		{byName["ramp"], [][2]time.Duration{{20 * s, 50 * s}}},
		{byName["flapping"], [][2]time.Duration{{20 * s, 25 * s}, {30 * s, 35 * s}, {40 * s, 45 * s}, {50 * s, 55 * s}}},
		{byName["flapping"].Scaled(0.1), [][2]time.Duration{{2 * s, 2500 * time.Millisecond}, {3 * s, 3500 * time.Millisecond}, {4 * s, 4500 * time.Millisecond}, {5 * s, 5500 * time.Millisecond}}},
		{byName["delay100"], [][2]time.Duration{{20 * s, 50 * s}}},
		{byName["delay-ramp"], [][2]time.Duration{{20 * s, 50 * s}}},
	} {
		if got := c.sc.FaultWindows(); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.sc.Name, got, c.want)
		}
	}
}

// TestRefused: a request that fails without a downstream call counts as
// refused; one that reaches the downstream does not.
func TestRefused(t *testing.T) {
	errRefused := errors.New("refused")
	var n atomic.Int64
	every2nd := StackFunc(func(ctx context.Context, call func(context.Context) error) error {
		if n.Add(1)%2 == 0 {
			return errRefused
		}
		return call(ctx)
	})
	synctest.Test(t, func(t *testing.T) {
		res, err := Run(Cell{Server: Model, Scenario: Scenarios[0], Load: Loads[1], Seed: 1}, every2nd)
		if err != nil {
			t.Fatal(err)
		}
		if d := res.Refused - res.Requests/2; d < -1 || d > 1 {
			t.Errorf("%d refused of %d requests, want half", res.Refused, res.Requests)
		}
	})
}
