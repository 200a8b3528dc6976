package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/internal/scenario"
)

// TestFrontier: the frontier of a cell is the stack with the most
// successes of all, whatever its kind, and callguard is read against it.
func TestFrontier(t *testing.T) {
	runs := func(name string, ns ...int) cellRuns {
		r := cellRuns{stack: stackDef{name: name}}
		for _, n := range ns {
			r.results = append(r.results, scenario.Result{Successes: n})
		}
		return r
	}
	c := sweepCell{
		scenario: scenario.Scenario{Name: "s"}, load: scenario.Load{Name: "l"},
		runs: []cellRuns{runs("callguard", 90, 95, 100), runs("none", 100, 101, 102), runs("failsafe", 10, 20, 30)},
	}
	best, cg, ok := c.frontierOf()
	if !ok || best.stack.name != "none" || cg.stack.name != "callguard" {
		t.Fatalf("frontier %q, callguard %q, ok %t; want none, callguard", best.stack.name, cg.stack.name, ok)
	}
	out := sweep{cells: []sweepCell{c}}.frontier()
	if !strings.Contains(out, "| s / l | 95 [90–100] | none | 101 [100–102] | 94.1 % | tie | 0 | – |") || !strings.Contains(out, "in 0 of 1 cells") {
		t.Errorf("frontier table:\n%s", out)
	}
}

// TestFrontierAtProtection: a stack that scores more by sending more
// downstream calls, or by wasting more worker time, is not the frontier at
// equal protection.
func TestFrontierAtProtection(t *testing.T) {
	runs := func(name string, succ int, amp, wasted float64) cellRuns {
		r := cellRuns{stack: stackDef{name: name}}
		for range 3 {
			r.results = append(r.results, scenario.Result{Successes: succ, Amplification: amp, Wasted: time.Duration(wasted * float64(time.Second))})
		}
		return r
	}
	c := sweepCell{runs: []cellRuns{
		runs("callguard", 100, 0.5, 10), runs("naive-retry", 200, 3, 10), runs("hedge", 150, 0.5, 40),
		runs("careful", 101, 0.54, 13), runs("worse", 90, 0.4, 5),
	}}
	best, _, ok := c.frontierAtProtectionOf()
	if !ok || best.stack.name != "careful" {
		t.Errorf("frontier at equal protection %q, ok %t; want careful", best.stack.name, ok)
	}
}

// TestPaired: seed by seed, a stack ahead in every seed wins even when the
// seeds' spread makes the ranges overlap, and one behind in a seed ties.
func TestPaired(t *testing.T) {
	runs := func(ns ...int) cellRuns {
		var r cellRuns
		for _, n := range ns {
			r.results = append(r.results, scenario.Result{Successes: n})
		}
		return r
	}
	for _, tc := range []struct {
		a, b   cellRuns
		want   string
		lo, hi int
	}{
		{runs(101, 201, 305), runs(100, 200, 300), "win", 1, 5},
		{runs(99, 201, 305), runs(100, 200, 300), "tie", -1, 5},
		{runs(90, 190), runs(100, 200), "loss", -10, -10},
	} {
		if v, lo, hi := paired(tc.a, tc.b); v != tc.want || lo != tc.lo || hi != tc.hi {
			t.Errorf("paired = %s %+d..%+d, want %s %+d..%+d", v, lo, hi, tc.want, tc.lo, tc.hi)
		} else if compare(tc.a, tc.b) == "win" && tc.want == "win" && tc.a.results[0].Successes < tc.b.results[2].Successes {
			t.Errorf("ranges overlap, compare says win")
		}
	}
}
