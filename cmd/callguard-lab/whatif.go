package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	"github.com/callguard/callguard/preset"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/spec"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
)

// stack is one row of a what-if table: a name and what makes it afresh
// for each run; drawn: its runs get a timeline.
type stack struct {
	name  string
	make  func() (scenario.Stack, error)
	drawn bool
}

// whatIfSeed seeds every row's randomness (the retries' jitter, the
// throttles' draws) and the model's: a what-if in virtual time gives the
// same numbers every run.
const whatIfSeed = 1

// The rows' names.
const (
	rowYours       = "your chain"
	rowCanonical   = "canonical order"
	rowRecommended = "recommended chain"
	rowNone        = "no protection"
)

// subject is what a what-if runs: a chain's policies (new ones on each
// call), the options it is linted with, and, for a chain whose errors
// are not the model's (a service config's, which retries gRPC codes),
// how a call's error reaches it.
type subject struct {
	name     string
	policies func() ([]chain.Policy, error)
	opts     chain.Options
	// wrap, if set, runs the chain over the scenario's calls (nil: the
	// chain is the stack).
	wrap func(c *chain.Chain) scenario.Stack
	// ordered: the order is not the user's (a conversion's): no
	// canonical-order row.
	ordered bool
}

// whatIf is --chain FILE: the chain's findings, then the chain, the same
// policies in the canonical order, the recommended chain and no protection
// through the protection scenarios (those only selects, if given), in
// virtual time or, live, in real time.
func (l *lab) whatIf(file, only string, rate float64, callers int, live bool) error {
	s, err := spec.Load(file)
	if err != nil {
		return err
	}
	return l.whatIfOf(subject{name: file, policies: s.Seeded(whatIfSeed).Policies, opts: s.Options()}, only, rate, callers, live)
}

func (l *lab) whatIfOf(sub subject, only string, rate float64, callers int, live bool) error {
	file := sub.name
	scenarios, err := whatIfScenarios(only)
	if err != nil {
		return err
	}
	load := scenario.Loads[0]
	switch {
	case callers > 0:
		load = scenario.Load{Name: fmt.Sprintf("%d callers", callers), Callers: callers, Pace: 100 * time.Millisecond, Deadline: time.Second}
	case rate > 0:
		load = scenario.Load{Name: fmt.Sprintf("%g/s", rate), Rate: rate, Deadline: time.Second}
	}
	// The lint of what the run does: the load's deadline is the callers'
	// (CG004). Strict or not, the run goes on: its findings are printed.
	opts := sub.opts
	opts.CallerDeadline, opts.Strict = load.Deadline, false
	ps, err := sub.policies()
	if err != nil {
		return err
	}
	c, err := opts.New(ps...)
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
	found := "no finding"
	if len(fs) > 0 {
		found = fmt.Sprintf("%d findings", len(fs))
	}
	fmt.Fprintf(l.out, "  lint, with the load's %v deadline as the callers' (lint.callerDeadline): %s\n", load.Deadline, found)
	var warned []string // the codes of the warnings
	for _, f := range fs {
		fmt.Fprintf(l.out, "  lint: %s\n", wrap(f.String(), 100))
		if f.Severity != chain.SeverityInfo && !slices.Contains(warned, f.Code) {
			warned = append(warned, f.Code)
		}
	}
	order := canonicalOrder(ps)
	reordered := !slices.IsSorted(order) && !sub.ordered
	stacks := whatIfStacks(sub, opts, order, reordered, 1)
	if reordered {
		if cc, err := stacks[1].make(); err == nil {
			fmt.Fprintf(l.out, "  the same policies in the canonical order: %v\n", cc)
		}
	} else {
		fmt.Fprintln(l.out, "  (your chain is already in the canonical order)")
	}
	if rc, err := stacks[len(stacks)-2].make(); err == nil {
		fmt.Fprintf(l.out, "  the recommended chain (package preset): %v\n", rc)
	}
	virtualStacks := stacks
	if live {
		stacks = whatIfStacks(sub, opts, order, reordered, liveScale)
	}

	how := "in virtual time"
	if live {
		how = fmt.Sprintf("live: in real time, over a real loopback HTTP server, each scenario's timeline × %g (warm-up, fault and horizon) and so every breaker's open stay (%v for the recommended chain's %v); not the service times, the downstream's queue, the callers' deadline, nor the chains' timeouts, backoff and windows, which are measured against them; every time in real seconds; the rows of a scenario run side by side. Metastability is judged at the scenario's own durations, in virtual time, as the live run cannot scale them all", liveScale, time.Duration(float64(preset.DefaultOpenTimeout)*liveScale), preset.DefaultOpenTimeout)
	}
	fmt.Fprintf(l.out, "\nAgainst the protection model (docs/protection.md): %d workers, p50 %v / p99 %v, %s load, each request with a %v deadline; %s.\n",
		scenario.Model.Workers, scenario.Model.Median, scenario.Model.P99, load.Name, load.Deadline, how)
	printLegend(l.out, load, scenarios, stacks, live)

	var expected time.Duration
	if live {
		for _, w := range scenarios {
			sc := w.sc.Scaled(liveScale)
			expected += sc.Start + sc.Horizon
		}
	}
	l.progress.begin(expected)
	defer l.progress.end()
	for n, w := range scenarios {
		if err := l.ctx.Err(); err != nil {
			return err
		}
		sc := w.sc
		if live {
			sc = sc.Scaled(liveScale)
		}
		l.progress.show(fmt.Sprintf("[%d/%d] %s %s", n+1, len(scenarios), w.id, sc.Name))
		results, err := l.runStacks(sc, load, stacks, live)
		if err != nil {
			return err
		}
		judged := results // whose metastability the table reports
		if live {
			if judged, err = l.runStacks(w.sc, load, virtualStacks, false); err != nil {
				return err
			}
		}
		t := &Table{ID: w.id, Title: "scenario " + sc.Name, Setup: describeScenario(sc),
			Columns: []string{"stack", "downstream calls per request", "time to trip", "recovered after the downstream", "caller p50 / p99", "server work wasted", "successes"}}
		for i, st := range stacks {
			res := results[i]
			if st.drawn {
				tl := scenarioTimeline(t.ID, sc, st.name, res.Result, res.changes)
				l.report.Timelines = append(l.report.Timelines, tl)
				t.Timelines = append(t.Timelines, tl.ID)
			}
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
		}
		t.Notes = append(t.Notes, "reading: "+reading(sc, stacks, results, warned))
		for i, st := range stacks {
			if n := metastability(st.name, results[i].Result, judged[i].Result, w.sc, live); n != "" {
				t.Notes = append(t.Notes, n)
			}
		}
		t.Unjudged, t.Verdict = true, "measured; no reference to judge your chain against"
		l.drawn = len(l.report.Timelines)
		l.report.Tables = append(l.report.Tables, t)
		l.progress.clear()
		t.print(l.out)
	}
	return nil
}

// whatIfStacks returns the rows of the tables, their breakers' open stays
// × scale: your chain, the canonical order if order differs, the
// recommended chain and no protection.
func whatIfStacks(sub subject, opts chain.Options, order []int, reordered bool, scale float64) []stack {
	policies := func() ([]chain.Policy, error) {
		ps, err := sub.policies()
		if err != nil {
			return nil, err
		}
		return scaleStays(ps, scale)
	}
	build := func(ps []chain.Policy) (scenario.Stack, error) {
		c, err := opts.New(ps...)
		if err != nil || sub.wrap == nil {
			return c, err
		}
		return sub.wrap(c), nil
	}
	yours := func() (scenario.Stack, error) {
		ps, err := policies()
		if err != nil {
			return nil, err
		}
		return build(ps)
	}
	stacks := []stack{{rowYours, yours, true}}
	if reordered {
		canonical := func() (scenario.Stack, error) {
			ps, err := policies()
			if err != nil {
				return nil, err
			}
			out := make([]chain.Policy, len(ps))
			for i, k := range order {
				out[i] = ps[k]
			}
			return build(out)
		}
		stacks = append(stacks, stack{rowCanonical, canonical, true})
	}
	recommended := func() (scenario.Stack, error) {
		stay := time.Duration(float64(preset.DefaultOpenTimeout) * scale)
		return preset.Chain(preset.Settings{OpenTimeout: stay, Rand: rand.NewPCG(whatIfSeed, 0)}, func(err error) bool { return errors.Is(err, scenario.ErrOverloaded) })
	}
	none := func() (scenario.Stack, error) { return scenario.None, nil }
	return append(stacks, stack{rowRecommended, recommended, false}, stack{rowNone, none, false})
}

// metastability is a table's note on a row's metastability (or ""): from
// the run itself in virtual time; live, from the same scenario at its own
// durations in virtual time (judged), the live run's (res) said beside
// it where they differ.
func metastability(name string, res, judged scenario.Result, sc scenario.Scenario, live bool) string {
	const what = "the downstream did not come back within the run: fewer than half the warm-up's share of requests succeed in its last 10 s"
	switch {
	case !live && res.Metastable:
		return name + ": metastable: " + what
	case !live:
		return ""
	case res.Metastable && judged.Metastable:
		return name + ": metastable, live and in virtual time at the scenario's own durations: " + what
	case judged.Metastable:
		return name + ": metastable in virtual time, at the scenario's own durations (" + what + "); the live run, shorter, does not show it"
	case res.Metastable:
		rec := "comes back within the run"
		if judged.Recover >= 0 {
			rec = fmt.Sprintf("recovers %.1f s after the downstream", (judged.Recover - sc.Healed).Seconds())
		}
		return fmt.Sprintf("%s: not metastable: at the scenario's own durations, in virtual time, it %s. Live, fewer than half the warm-up's share of requests succeed in the run's last %s, but only the timeline and the breakers' open stays are × %g there, not the downstream's service times and queue, nor the chain's timeouts, backoff and windows.", name, rec, seconds(10*sc.Scaled(liveScale).Unit), liveScale)
	}
	return ""
}

// stackRun is one stack's run of a scenario: what it measured, and its
// first breaker's state changes.
type stackRun struct {
	scenario.Result
	changes []breaker.StateChange
}

// runStacks runs sc for each stack: one after another in virtual time;
// live, side by side, each over a loopback server of its own (the
// scenario's real time once, not once per row).
func (l *lab) runStacks(sc scenario.Scenario, load scenario.Load, stacks []stack, live bool) ([]stackRun, error) {
	out := make([]stackRun, len(stacks))
	errs := make([]error, len(stacks))
	one := func(i int) {
		var mu sync.Mutex
		var changes []breaker.StateChange // guarded by mu
		defer func() {
			mu.Lock()
			defer mu.Unlock()
			out[i].changes = changes
		}()
		watched := func() (scenario.Stack, error) {
			st, err := stacks[i].make()
			if err != nil {
				return nil, err
			}
			if c, ok := st.(*chain.Chain); ok {
				if bs := adapter.Breakers(c); len(bs) > 0 {
					bridge.BreakerWatch(bs[0], "", func(c breaker.StateChange) {
						mu.Lock()
						defer mu.Unlock()
						changes = append(changes, c)
					})
				}
			}
			return l.interruptible(st, live), nil
		}
		cell := scenario.Cell{Server: scenario.Model, Scenario: sc, Load: load, Seed: whatIfSeed, Record: true}
		if live {
			st, err := watched()
			if err != nil {
				errs[i] = err
				return
			}
			cell.Network = scenario.Loopback
			out[i].Result, errs[i] = scenario.Run(cell, st)
			return
		}
		errs[i] = virtual.Run(func(vt *testing.T) {
			st, err := watched()
			if err != nil {
				vt.Fatal(err)
			}
			if out[i].Result, err = scenario.Run(cell, st); err != nil {
				vt.Fatal(err)
			}
		})
	}
	if live {
		var wg sync.WaitGroup
		for i := range stacks {
			wg.Go(func() { one(i) })
		}
		wg.Wait()
	} else {
		for i := range stacks {
			if err := l.ctx.Err(); err != nil {
				return nil, err
			}
			one(i)
		}
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", sc.Name, stacks[i].name, err)
		}
	}
	return out, nil
}

// whatIfScenario is a scenario of the what-if and its table's id: W1 for
// the first of scenario.Scenarios, whatever --only selects.
type whatIfScenario struct {
	id string
	sc scenario.Scenario
}

// whatIfScenarios returns the scenarios --only selects, in their order:
// by id (W2; W for all) or by the start of a name (blackhole, capacity30),
// comma-separated; every scenario with only empty. A name that selects
// none is an error that lists them.
func whatIfScenarios(only string) ([]whatIfScenario, error) {
	all := make([]whatIfScenario, len(scenario.Scenarios))
	names := make([]string, len(all))
	for i, sc := range scenario.Scenarios {
		all[i] = whatIfScenario{fmt.Sprintf("W%d", i+1), sc}
		names[i] = all[i].id + " " + sc.Name
	}
	if strings.TrimSpace(only) == "" {
		return all, nil
	}
	picked := make([]bool, len(all))
	var unknown []string
	for _, o := range strings.Split(only, ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		found := false
		for i, w := range all {
			if strings.EqualFold(o, "W") || strings.EqualFold(o, w.id) || strings.HasPrefix(w.sc.Name, strings.ToLower(o)) {
				picked[i], found = true, true
			}
		}
		if !found {
			unknown = append(unknown, fmt.Sprintf("%q", o))
		}
	}
	var sel []whatIfScenario
	for i, w := range all {
		if picked[i] {
			sel = append(sel, w)
		}
	}
	if len(unknown) > 0 || len(sel) == 0 {
		return nil, fmt.Errorf("--only %q with --chain: %s selects no scenario of the what-if; its scenarios are %s (by id, W for all, or by the start of a name; the reference experiments, A1 to E1, run without --chain)",
			only, strings.Join(unknown, ", "), strings.Join(names, ", "))
	}
	return sel, nil
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

// scaleStays returns ps with each breaker's open stays (OpenTimeout,
// MaxOpenTimeout) × k, its other settings kept: --live scales the
// timeline, and a stay measured against it must follow, or a breaker that
// recovers in 2 s of a 60 s run looks metastable in a 6 s one.
func scaleStays(ps []chain.Policy, k float64) ([]chain.Policy, error) {
	if k == 1 {
		return ps, nil
	}
	out := slices.Clone(ps)
	for i, p := range out {
		b, ok := p.(*breaker.Breaker)
		if !ok {
			continue
		}
		s := b.Settings()
		s.OpenTimeout = time.Duration(float64(s.OpenTimeout) * k)
		s.MaxOpenTimeout = time.Duration(float64(s.MaxOpenTimeout) * k)
		nb, err := breaker.New(s)
		if err != nil {
			return nil, fmt.Errorf("%v, its open stay × %g: %w", b, k, err)
		}
		out[i] = nb
	}
	return out, nil
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

// canonicalOrder returns the indexes of ps in the canonical order. With
// one timeout, it is the attempt timeout; with more, the longest is the
// overall one.
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
