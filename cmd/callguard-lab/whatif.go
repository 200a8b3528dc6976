package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/internal/adapter"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/internal/scenario"
	"github.com/callguard/callguard/internal/virtual"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/spec"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
)

// whatIf is --chain FILE: the chain's findings, then the chain and the
// same policies in the canonical order through the protection scenarios,
// in virtual time.
func (l *lab) whatIf(file string, rate float64, callers int, live bool) error {
	s, err := spec.Load(file)
	if err != nil {
		return err
	}
	c, err := s.Chain()
	if err != nil {
		return err
	}
	fmt.Fprintf(l.out, "callguard lab: what will %s do?\n\n  chain: %v\n", file, c)
	l.report.Mode, l.report.Proto, l.report.Clock = "what-if, in virtual time", "", "the scenario's time"
	if live {
		l.report.Mode, l.report.Proto = fmt.Sprintf("what-if, live (timelines × %g)", liveScale), "http"
		l.report.Clock = fmt.Sprintf("real time: the scenario's timeline × %g", liveScale)
	}
	fs := c.Findings()
	if len(fs) == 0 {
		fmt.Fprintln(l.out, "  lint: no finding")
	}
	for _, f := range fs {
		fmt.Fprintf(l.out, "  lint: %s\n", wrap(f.String(), 100))
	}
	load := scenario.Loads[0]
	switch {
	case callers > 0:
		load = scenario.Load{Name: fmt.Sprintf("%d callers", callers), Callers: callers, Pace: 100 * time.Millisecond, Deadline: time.Second}
	case rate > 0:
		load = scenario.Load{Name: fmt.Sprintf("%g/s", rate), Rate: rate, Deadline: time.Second}
	}
	canonical, reordered, err := canonicalOf(s)
	if err != nil {
		return err
	}
	stacks := []struct {
		name string
		make func() (scenario.Stack, error)
	}{{"your chain", func() (scenario.Stack, error) { return s.Chain() }}}
	if reordered {
		stacks = append(stacks, struct {
			name string
			make func() (scenario.Stack, error)
		}{"canonical order", canonical})
		cc, _ := canonical()
		if cc, ok := cc.(*chain.Chain); ok {
			fmt.Fprintf(l.out, "  the same policies in the canonical order: %v\n", cc)
		}
	} else {
		fmt.Fprintln(l.out, "  (your chain is already in the canonical order)")
	}
	how := "in virtual time"
	if live {
		how = fmt.Sprintf("live: in real time, over a real loopback HTTP server, each scenario's timeline × %g (warm-up, fault and horizon; not the service times, nor your chain's settings), every time in real seconds", liveScale)
	}
	fmt.Fprintf(l.out, "\nAgainst the protection model (docs/protection.md): %d workers, p50 %v / p99 %v, %s load, each request with a %v deadline; %s.\n",
		scenario.Model.Workers, scenario.Model.Median, scenario.Model.P99, load.Name, load.Deadline, how)
	var expected time.Duration
	if live {
		for _, sc := range scenario.Scenarios {
			sc = sc.Scaled(liveScale)
			expected += (sc.Start + sc.Horizon) * time.Duration(len(stacks))
		}
	}
	l.progress.begin(expected)
	defer l.progress.end()
	for i, sc := range scenario.Scenarios {
		if err := l.ctx.Err(); err != nil {
			return err
		}
		if live {
			sc = sc.Scaled(liveScale)
		}
		l.progress.show(fmt.Sprintf("[%d/%d] %s", i+1, len(scenario.Scenarios), sc.Name))
		t := &Table{ID: "W" + fmt.Sprint(i+1), Title: "scenario " + sc.Name, Setup: describeScenario(sc),
			Columns: []string{"stack", "downstream calls per request", "time to trip", "recovered after the downstream", "caller p50 / p99", "server work wasted", "successes"}}
		for _, st := range stacks {
			if err := l.ctx.Err(); err != nil {
				return err
			}
			var res scenario.Result
			var changes []breaker.StateChange
			var mu sync.Mutex
			watched := func() (scenario.Stack, error) {
				stack, err := st.make()
				if err != nil {
					return nil, err
				}
				if c, ok := stack.(*chain.Chain); ok {
					if bs := adapter.Breakers(c); len(bs) > 0 {
						bridge.BreakerWatch(bs[0], "", func(sc breaker.StateChange) {
							mu.Lock()
							defer mu.Unlock()
							changes = append(changes, sc)
						})
					}
				}
				return l.interruptible(stack, live), nil
			}
			var err error
			if live {
				res, err = runLive(sc, load, watched)
			} else {
				err = virtual.Run(func(vt *testing.T) {
					stack, err := watched()
					if err != nil {
						vt.Fatal(err)
					}
					res, err = scenario.Run(scenario.Cell{Server: scenario.Model, Scenario: sc, Load: load, Seed: 1, Record: true}, stack)
					if err != nil {
						vt.Fatal(err)
					}
				})
			}
			if err != nil {
				return err
			}
			mu.Lock()
			l.report.Timelines = append(l.report.Timelines, scenarioTimeline(t.ID, sc, st.name, res, changes))
			mu.Unlock()
			trip, rec := "never", "not within the run"
			if res.Detect >= 0 {
				trip = fmt.Sprintf("%.1f s", res.Detect.Seconds())
			}
			if res.Recover >= 0 {
				rec = fmt.Sprintf("%.1f s", (res.Recover - sc.Healed).Seconds())
			}
			t.Rows = append(t.Rows, []Cell{text(st.name), num(res.Amplification, "", none, "%.2f"), text(trip), text(rec),
				text(fmt.Sprintf("%v / %v", res.P50.Round(time.Millisecond), res.P99.Round(time.Millisecond))),
				num(res.Wasted.Seconds(), "worker-s", none, "%.1f worker-s"), num(float64(res.Successes), "", none, "%.0f")})
			if res.Metastable {
				t.Notes = append(t.Notes, st.name+": metastable: the downstream did not come back within the run")
			}
		}
		t.Unjudged, t.Verdict = true, "measured; no reference to judge your chain against"
		l.report.Tables = append(l.report.Tables, t)
		l.progress.clear()
		t.print(l.out)
	}
	return nil
}

// interruptible is stack, refusing every call once the lab is interrupted
// (the scenario then runs on to its end, quickly); live, it also ends the
// calls in flight. In virtual time it only reads the lab's context: a
// bubble's goroutines may not be woken from outside it.
func (l *lab) interruptible(stack scenario.Stack, live bool) scenario.Stack {
	return scenario.StackFunc(func(ctx context.Context, call func(context.Context) error) error {
		if err := l.ctx.Err(); err != nil {
			return err
		}
		if live {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(l.ctx, cancel)()
		}
		return stack.Do(ctx, call)
	})
}

// liveScale is how much --live shortens a scenario's timeline.
const liveScale = 0.1

// runLive runs one scenario (its timeline scaled by the caller) in real
// time, over a real loopback HTTP server in front of the model.
func runLive(sc scenario.Scenario, load scenario.Load, make func() (scenario.Stack, error)) (scenario.Result, error) {
	stack, err := make()
	if err != nil {
		return scenario.Result{}, err
	}
	return scenario.Run(scenario.Cell{Server: scenario.Model, Scenario: sc, Load: load, Seed: 1, Network: scenario.Loopback, Record: true}, stack)
}

// scenarioTimeline is the picture of one stack's run of sc: its first
// breaker's states, each request's outcome (binned: 400 bins over the
// run), the fault's windows.
func scenarioTimeline(id string, sc scenario.Scenario, stack string, res scenario.Result, changes []breaker.StateChange) *Timeline {
	events := make([]scenario.Event, len(changes))
	for i, c := range changes {
		events[i] = scenario.Event{At: c.At.Sub(res.Began), From: c.From, To: c.To}
	}
	tl := timeline(id+"-"+strings.ReplaceAll(stack, " ", "-"), sc.Name+": "+stack, sc.Start+sc.Horizon, events, nil, sc.FaultWindows())
	// Thousands of requests: one mark per kind per bin, with its count.
	bin := (sc.Start + sc.Horizon) / 400
	type key struct {
		bin  int64
		kind string
	}
	index := map[key]int{} // into tl.Marks
	for _, m := range res.Marks {
		k := key{int64(m.At / bin), m.Kind}
		i, ok := index[k]
		if !ok {
			i = len(tl.Marks)
			index[k] = i
			tl.Marks = append(tl.Marks, TimelineMark{At: (time.Duration(k.bin) * bin).Seconds(), Kind: m.Kind})
		}
		tl.Marks[i].N++
	}
	return tl
}

func describeScenario(sc scenario.Scenario) string {
	return fmt.Sprintf("Healthy for %v, then the fault for %v (the downstream healed %v after it started); measured until %v after it started.",
		sc.Start, sc.Length, sc.Healed, sc.Horizon)
}

// canonicalOf returns a maker of the spec's policies in the canonical
// order — fallback, overall timeout, retry, breaker, attempt timeout — and
// whether that differs from the spec's own order. With one timeout, it is
// the attempt timeout; with more, the longest is the overall one.
func canonicalOf(s *spec.Spec) (func() (scenario.Stack, error), bool, error) {
	ps, err := s.Policies()
	if err != nil {
		return nil, false, err
	}
	order := canonicalOrder(ps)
	reordered := false
	for i, k := range order {
		if k != i {
			reordered = true
		}
	}
	return func() (scenario.Stack, error) {
		ps, err := s.Policies()
		if err != nil {
			return nil, err
		}
		out := make([]chain.Policy, len(ps))
		for i, k := range order {
			out[i] = ps[k]
		}
		return s.Options().New(out...)
	}, reordered, nil
}

// canonicalOrder returns the indexes of ps in the canonical order.
func canonicalOrder(ps []chain.Policy) []int {
	var longest time.Duration
	timeouts := 0
	for _, p := range ps {
		if t, ok := p.(*timeout.Policy); ok {
			timeouts++
			longest = max(longest, t.Timeout())
		}
	}
	// fallback → overall timeout → retry → throttle → hedge → limit or
	// bulkhead → breaker → attempt timeout (docs/ordering.md).
	rank := func(p chain.Policy) int {
		switch v := p.(type) {
		case *fallback.Policy:
			return 0
		case *timeout.Policy:
			if timeouts > 1 && v.Timeout() == longest {
				return 1
			}
			return 7
		case *retry.Policy:
			return 2
		case *throttle.Throttle:
			return 3
		case *hedge.Policy:
			return 4
		case *limit.Limiter, *limit.Bulkhead:
			return 5
		case *breaker.Breaker:
			return 6
		}
		return 8
	}
	idx := make([]int, len(ps))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return rank(ps[a]) - rank(ps[b]) })
	return idx
}
