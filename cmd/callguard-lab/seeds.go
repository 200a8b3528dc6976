package main

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/internal/scenario"
	"github.com/callguard/callguard/internal/virtual"
)

// experiment is one of the lab's runs: an id (for --only), what it takes
// in the seed's time, and how to run it for a protocol.
type experiment struct {
	id       string
	title    string
	seedTime time.Duration // the experiment's real time at scale 1 (per protocol), for the progress line
	quick    float64       // its scale in a quick run: its timeline × quick
	perProto bool          // run once per protocol (else once)
	realTime bool          // runs in real time: scheduling noise is measured beside it
	run      func(l *lab, proto string) error
}

var experiments = []experiment{
	{"A1", "SEEDS A: the breaker's transitions, native engine and gobreaker", 16 * time.Second, 0.5, true, true, (*lab).transitions},
	{"A2", "SEEDS A: half-open probes that reach a downstream still down", 3 * time.Second, 1, true, true, (*lab).probes},
	{"A3", "SEEDS A: recovery on a flaky downstream (virtual time)", 0, 1, false, false, (*lab).recovery},
	{"C1", "SEEDS C1: retry inside vs outside the breaker", time.Second, 1, true, true, (*lab).c1},
	{"C2", "SEEDS C2: the timeout vs the breaker's reaction time", 30 * time.Second, 0.1, true, true, (*lab).c2},
	{"C3", "SEEDS C3: retrying into an open breaker", 8 * time.Second, 0.25, true, true, (*lab).c3},
	{"C4", "SEEDS C4: a timeout below the tail latency", 40 * time.Second, 0.25, true, true, (*lab).c4},
	{"K1", "kill -9: a downstream process killed mid-run and restarted", 4 * time.Second, 1, true, true, (*lab).kill},
	{"E1", "one bad backend of ten: per-endpoint ejection (gRPC)", 144 * time.Second, 0.5, false, true, (*lab).oneBad},
}

func ms(d time.Duration) float64  { return float64(d) / float64(time.Millisecond) }
func sec(d time.Duration) float64 { return d.Seconds() }

func findings(fs []chain.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.String())
	}
	return out
}

// timeline turns a driver's events and marks into a report timeline.
func timeline(id, title string, dur time.Duration, events []scenario.Event, marks []scenario.Mark, faults [][2]time.Duration) *Timeline {
	tl := &Timeline{ID: id, Title: title, Duration: dur.Seconds()}
	state, from := "closed", 0.0
	for _, e := range events {
		at := e.At.Seconds()
		tl.States = append(tl.States, StateSpan{From: from, To: at, State: state})
		state, from = e.To.String(), at
	}
	tl.States = append(tl.States, StateSpan{From: from, To: tl.Duration, State: state})
	for _, m := range marks {
		tl.Marks = append(tl.Marks, TimelineMark{At: m.At.Seconds(), Kind: m.Kind})
	}
	for _, f := range faults {
		tl.Faults = append(tl.Faults, [2]float64{f[0].Seconds(), f[1].Seconds()})
	}
	return tl
}

// transitions is A1: the seed's script on both engines.
func (l *lab) transitions(proto string) error {
	scale := l.scale()
	want := []float64{700, 1750, 1750, 2800, 2900, 4200, 5250, 5250, 6300, 6400}
	names := []string{"closed → open", "open → half-open", "half-open → open", "open → half-open", "half-open → closed",
		"closed → open", "open → half-open", "half-open → open", "open → half-open", "half-open → closed"}
	t := &Table{ID: "A1", Title: "the breaker's transitions", Proto: proto, Scale: scale,
		Setup:     "A call every 50 ms, 160 calls; the downstream fails in [500 ms, 2000 ms) and [4000 ms, 5500 ms); 5 consecutive failures trip, 3 probes, open 1025 ms (gobreaker/v2: MaxRequests 3, Timeout 1025ms).",
		Columns:   []string{"#", "transition", "reference (SEEDS A)", "native", "gobreaker"},
		Tolerance: "each transition within 15 ms of the reference instant (real time; the reference run, SEEDS A, was itself 1–10 ms late), later by the noise; the counts exact when the timer is on time (160 calls, one every 50 ms, on the driver's schedule), but a late timer moves a call across the end of each of the 4 open periods: reached, failed and rejected open are allowed 4 calls per 50 ms of noise or part of it, either way; the probe-quota rejections exact (one call at a time)"}
	res := map[breaker.Engine]scenario.TransitionsResult{}
	for _, e := range []breaker.Engine{breaker.EngineNative, breaker.EngineGobreaker} {
		r, err := scenario.Transitions(proto, e, scale)
		if err != nil {
			return err
		}
		res[e] = r
	}
	t.Noise = l.measured(scale)
	engines := []breaker.Engine{breaker.EngineNative, breaker.EngineGobreaker}
	refs := map[breaker.Engine][]TimelineRef{}
	for i, w := range want {
		row := []Cell{text(fmt.Sprint(i + 1)), text(names[i]), text(fmt.Sprintf("%.0f ms", w))}
		for _, e := range engines {
			evs := res[e].Events
			ref := TimelineRef{At: w / 1000, Label: fmt.Sprint(i + 1), Note: fmt.Sprintf("%d %s: the reference's %s", i+1, names[i], quantity(w, "ms"))}
			if i < len(evs) {
				got := ms(evs[i].At)
				row = append(row, num(got, "ms", none, "%.1f ms"))
				t.checkTime(fmt.Sprintf("%v transition %d", e, i+1), got, w, 15, "ms")
				ref.Off = !t.checks[len(t.checks)-1].pass(t.allowance("ms"))
				ref.Note += fmt.Sprintf(", measured %s (%+.1f ms)", quantity(got, "ms"), got-w)
				t.expect(fmt.Sprintf("%v transition %d is %s", e, i+1, names[i]), evs[i].From.String()+" → "+evs[i].To.String() == names[i])
			} else {
				row = append(row, text("missing"))
				t.expect(fmt.Sprintf("%v transition %d", e, i+1), false)
				ref.Off, ref.Note = true, ref.Note+", missing"
			}
			refs[e] = append(refs[e], ref)
		}
		t.Rows = append(t.Rows, row)
	}
	for _, e := range engines {
		r := res[e]
		t.expect(fmt.Sprintf("%v: %d transitions", e, len(r.Events)), len(r.Events) == 10)
		// A call every 50 ms: a late timer moves a call across the end of
		// each of the 4 open periods (and, a whole interval late, across a
		// fault window's start).
		t.checkPaced(fmt.Sprintf("%v reached the downstream", e), float64(r.Reached), 80, "calls", 50, 4)
		t.checkPaced(fmt.Sprintf("%v failed at the downstream", e), float64(r.FailedReached), 12, "calls", 50, 4)
		t.checkPaced(fmt.Sprintf("%v rejected open", e), float64(r.Open), 80, "calls", 50, 4)
		t.check(fmt.Sprintf("%v rejected for the probe quota", e), float64(r.Probes), 0, 0, "calls")
		tl := timeline("A1-"+proto+"-"+e.String(), "A1 over "+protoName(proto)+", "+e.String()+" engine", 8*time.Second, r.Events, r.Marks, r.FaultWindows)
		tl.Refs = refs[e]
		l.report.Timelines = append(l.report.Timelines, tl)
	}
	n, g := res[breaker.EngineNative], res[breaker.EngineGobreaker]
	count := func(v int) Cell { return num(float64(v), "calls", none, "%.0f") }
	t.Rows = append(t.Rows,
		[]Cell{text(""), text("calls"), text("160"), count(n.Calls), count(g.Calls)},
		[]Cell{text(""), text("reached the downstream"), text("80"), count(n.Reached), count(g.Reached)},
		[]Cell{text(""), text("failed at the downstream"), text("12"), count(n.FailedReached), count(g.FailedReached)},
		[]Cell{text(""), text("rejected: open"), text("80"), count(n.Open), count(g.Open)},
		[]Cell{text(""), text("rejected: probe quota"), text("0"), count(n.Probes), count(g.Probes)})
	l.add(t)
	return nil
}

// probes is A2: failed probes for N = 1, 3, 10 with 20 callers.
func (l *lab) probes(proto string) error {
	scale := l.scale()
	t := &Table{ID: "A2", Title: "half-open probes that reach a downstream still down", Proto: proto, Scale: scale,
		Setup:     "20 concurrent callers; the downstream answers failures (20 ms each) until the breaker has opened 3 times; 5 consecutive failures trip, open 150 ms.",
		Columns:   []string{"N probes", "opens", "half-opens", "failed probes", "reference (SEEDS A)"},
		Tolerance: "3 opens, 3 half-opens, exact (the driver heals the downstream at the third open, so the third half-open closes); failed probes 2N, or fewer when callers arrive late (the reference, SEEDS A: 18 for N = 10)"}
	ref := map[int]float64{1: 2, 3: 6, 10: 18}
	for _, n := range []int{1, 3, 10} {
		r, err := scenario.Probes(proto, n, 20, scale)
		if err != nil {
			return err
		}
		t.Rows = append(t.Rows, []Cell{text(fmt.Sprint(n)), num(float64(r.Opens), "", none, "%.0f"), num(float64(r.HalfOpens), "", none, "%.0f"),
			num(float64(r.FailedProbes), "", none, "%.0f"), text(fmt.Sprintf("3 / 3 / %.0f", ref[n]))})
		t.check(fmt.Sprintf("N=%d opens", n), float64(r.Opens), 3, 0, "")
		t.check(fmt.Sprintf("N=%d half-opens", n), float64(r.HalfOpens), 3, 0, "")
		t.expect(fmt.Sprintf("N=%d failed probes %d within [N, 2N]", n, r.FailedProbes), r.FailedProbes >= n && r.FailedProbes <= 2*n)
	}
	t.Notes = append(t.Notes, "The reference (SEEDS A) counted 18 for N = 10: two of its callers arrived after a round had filled. Here every probe of a round is in flight before the first fails (each failure takes 20 ms), so a round sends N.")
	l.add(t)
	return nil
}

// recovery is A3: one row of the seed's recovery grid, in virtual time.
func (l *lab) recovery(string) error {
	t := &Table{ID: "A3", Title: "recovery on a flaky downstream, q = 90 %, N = 10 probes (virtual time)",
		Setup:     "A call every 50 ms, open ≈ 1 s, 600 s horizon; the downstream succeeds with probability q; all N probes must succeed to close.",
		Columns:   []string{"trials", "median", "p90", "re-opens", "reference (SEEDS A)"},
		Tolerance: "median and p90 within 25 %, re-opens within 0.5 (a sample of trials)"}
	trials := 2000
	if !l.full {
		trials = 400
	}
	var res scenario.RecoveryResult
	err := virtual.Run(func(vt *testing.T) {
		var err error
		res, err = scenario.RunRecovery(scenario.Recovery{SuccessRate: 0.9, Probes: 10, OpenTimeout: 1025 * time.Millisecond,
			Interval: 50 * time.Millisecond, Horizon: 600 * time.Second, Trials: trials, Seed: 1})
		if err != nil {
			vt.Fatal(err)
		}
	})
	if err != nil {
		return err
	}
	t.Rows = append(t.Rows, []Cell{text(fmt.Sprint(trials)), num(sec(res.Median), "s", 1.80, "%.2f s"), num(sec(res.P90), "s", 6.85, "%.2f s"),
		num(res.MeanReopens, "", 2.0, "%.1f"), text("1.80 s / 6.85 s / 2.0")})
	t.check("median", sec(res.Median), 1.80, 0.45, "s")
	t.check("p90", sec(res.P90), 6.85, 1.7, "s")
	t.check("re-opens", res.MeanReopens, 2.0, 0.5, "")
	l.add(t)
	return nil
}

// c1 is SEEDS C1 over proto.
func (l *lab) c1(proto string) error {
	t := &Table{ID: "C1", Title: "retry inside vs outside the breaker", Proto: proto, Scale: 1,
		Setup:     "The downstream always fails; 12 logical requests of 3 attempts; 5 consecutive failures open the breaker.",
		Columns:   []string{"order", "breaker opened", "requests that reached the downstream", "calls the downstream received", "attempts rejected"},
		Tolerance: "exact: every value is a count the driver's schedule fixes (12 requests one after another, every answer a failure; no timing decides one)"}
	for _, outside := range []bool{false, true} {
		r, err := scenario.RetryOrder(proto, outside)
		if err != nil {
			return err
		}
		ref := [4]float64{5, 5, 15, 7}
		name := "breaker wraps retry (retry inside): the bad order"
		if outside {
			ref = [4]float64{2, 2, 5, 11}
			name = "retry wraps breaker (retry outside): recommended"
		} else {
			t.Findings = findings(r.Findings)
		}
		t.Chains = append(t.Chains, r.Chain)
		t.Rows = append(t.Rows, []Cell{text(name),
			num(float64(r.OpenedAfter), "request", ref[0], "after request %.0f"),
			num(float64(r.Reached), "", ref[1], "%.0f"), num(float64(r.Calls), "calls", ref[2], "%.0f"), num(float64(r.Rejected), "", ref[3], "%.0f")})
		t.check(name+": opened after request", float64(r.OpenedAfter), ref[0], 0, "")
		t.check(name+": reached", float64(r.Reached), ref[1], 0, "requests")
		t.check(name+": calls", float64(r.Calls), ref[2], 0, "calls")
		want := ref[3]
		if outside {
			want = 10 // see the note
		}
		t.check(name+": rejected", float64(r.Rejected), want, 0, "attempts")
	}
	t.Notes = append(t.Notes, "Retry outside: the reference (SEEDS C1) counts 11 rejected attempts, callguard 10. The reference's retry made request 2's third attempt into the breaker its second had just opened; callguard's retry asks the breaker before it waits and gives up on that request at once (retry.ReasonOpen), with the downstream's last answer.")
	l.add(t)
	return nil
}

// c2 is SEEDS C2 over proto.
func (l *lab) c2(proto string) error {
	scale := l.scale()
	t := &Table{ID: "C2", Title: "the timeout vs the breaker's reaction time", Proto: proto, Scale: scale,
		Setup:     "The downstream hangs; 5 consecutive failures open the breaker; each failure is known only when its call times out.",
		Columns:   []string{"call timeout", "20 callers: time to open", "calls", "caller time held", "1 caller: time to open", "calls", "time held"},
		Tolerance: "time to open within 5 %, plus 3 ms of real-time jitter (in the reference's time: ÷ the scale); 1 caller: 5 calls, exact (one call at a time, each a timeout: the fifth opens); 20 callers: 20–25 calls (as many as are in flight when the fifth times out)"}
	seed := map[[2]int][3]float64{{200, 20}: {0.21, 24, 4.9}, {1000, 20}: {1.00, 24, 24.1}, {3000, 20}: {3.01, 24, 72.1},
		{200, 1}: {1.01, 5, 1.0}, {1000, 1}: {5.02, 5, 5.0}, {3000, 1}: {15.01, 5, 15.0}}
	var slow, recommended string
	for _, msT := range []int{200, 1000, 3000} {
		row := []Cell{text(fmt.Sprintf("%.1f s", float64(msT)/1000))}
		for _, callers := range []int{20, 1} {
			r, err := scenario.Reaction(proto, time.Duration(msT)*time.Millisecond, callers, scale)
			if err != nil {
				return err
			}
			s := seed[[2]int{msT, callers}]
			row = append(row, num(sec(r.Open), "s", s[0], "%.2f s"), num(float64(r.Calls), "", s[1], "%.0f"), num(sec(r.Held), "s", s[2], "%.1f s"))
			T := float64(msT) / 1000
			want := T
			if callers == 1 {
				want = 5 * T
				t.check(fmt.Sprintf("%v s, 1 caller: calls", T), float64(r.Calls), 5, 0, "calls")
			} else {
				t.expect(fmt.Sprintf("%v s, 20 callers: %d calls within 20–25", T, r.Calls), r.Calls >= 20 && r.Calls <= 25)
			}
			t.checkTime(fmt.Sprintf("%v s, %d callers: time to open", T, callers), sec(r.Open), want, 0.05*want+0.003/scale, "s")
			switch {
			case msT == 3000 && callers == 1:
				// The lint speaks of the chain at the seed's durations, as
				// the table does.
				t.Findings = findings(r.Findings)
				slow = r.Chain + ": detection in 5 × 3 s = 15 s at 1 caller"
				if slices.ContainsFunc(r.Findings, func(f chain.Finding) bool { return f.Code == "CG004" }) {
					slow += ", the slow detection the lint flags (CG004)"
				}
			case msT == 200 && callers == 1:
				recommended = r.Chain + ": recommended, detection within 1 s at 1 caller"
			}
		}
		t.Rows = append(t.Rows, row)
	}
	t.Noise = l.measured(scale)
	t.Chains = append(t.Chains, slow, recommended)
	t.Notes = append(t.Notes, "20 callers: the reference (SEEDS C2) counted 24 calls; here as many calls reach the downstream as are in flight when the fifth times out (20 to 25, depending on how the callers' first calls line up).")
	l.add(t)
	return nil
}

// c3 is SEEDS C3 over proto.
func (l *lab) c3(proto string) error {
	scale := l.scale()
	t := &Table{ID: "C3", Title: "retrying into an open breaker", Proto: proto, Scale: scale,
		Setup:     "The breaker is open; each request makes up to 3 attempts, backoff 125 ms then 250 ms.",
		Columns:   []string{"configuration", "latency until the caller gets its failure: median", "p99", "reference (SEEDS C3)"},
		Tolerance: "median within 5 % + 5 ms of the 375 ms of waits (the reference's 370.1 ms, SEEDS C3, carried real-time noise); giving up: under 5 ms"}
	requests := 20
	for _, whenOpen := range []bool{true, false} {
		r, err := scenario.IntoOpen(proto, whenOpen, requests, scale)
		if err != nil {
			return err
		}
		name, ref := "retry even when open (RetryWhenOpen): the bad configuration", [2]float64{370.1, 379.1}
		if !whenOpen {
			name, ref = "give up when open: the default", [2]float64{0, 0}
			// The setting that differs: retry's description does not show it.
			t.Chains = append(t.Chains, r.Chain+", without RetryWhenOpen: the retry gives up at once on breaker.ErrOpen (the default)")
		} else {
			t.Findings = findings(r.Findings)
			t.Chains = append(t.Chains, r.Chain+", with retry.RetryWhenOpen(): the retry keeps retrying breaker.ErrOpen, waiting out its backoff")
		}
		t.Rows = append(t.Rows, []Cell{text(name), num(ms(r.Median), "ms", ref[0], "%.1f ms"), num(ms(r.P99), "ms", ref[1], "%.1f ms"), text(fmt.Sprintf("%.1f / %.1f ms", ref[0], ref[1]))})
		if whenOpen {
			t.checkTime("retrying: median", ms(r.Median), 375, 0.05*375+5, "ms")
		} else {
			t.between("giving up: median", ms(r.Median), math.Inf(-1), 5, "ms", true)
		}
	}
	t.Noise = l.measured(scale)
	l.add(t)
	return nil
}

// c4 is SEEDS C4 over proto.
func (l *lab) c4(proto string) error {
	scale := l.scale()
	t := &Table{ID: "C4", Title: "a timeout below the tail latency", Proto: proto, Scale: scale,
		Setup:     "A healthy downstream: answers take 10–100 ms, 20 % of them 100 ms–1 s; it finishes what it started (work for a caller that gave up is wasted). 20 callers for 20 s; the breaker opens on 10 % of the last 50 calls for 1 s, then closes with its window cleared.",
		Columns:   []string{"call timeout", "breaker opens", "time open", "calls made", "rejected by the breaker", "calls sent", "200 OK", "timed out", "server work wasted"},
		Tolerance: "100 ms: 10–22 opens, and nearly every timed-out call wasted work (within 25 %: see the note); 1 s: no open, under 1 % of the calls timed out"}
	for _, attempt := range []time.Duration{100 * time.Millisecond, time.Second} {
		r, err := scenario.Tail(proto, attempt, scale, 4)
		if err != nil {
			return err
		}
		// The seed's row, under the measured one: it did not count calls
		// made nor rejected.
		seedRow := []Cell{text("reference (SEEDS C4), 1s"), text("0"), text("0 s"), text("—"), text("—"), text("2,210"), text("2,210"), text("0"), text("0")}
		if attempt < time.Second {
			seedRow = []Cell{text("reference (SEEDS C4), 100ms"), text("16"), text("16 s"), text("—"), text("—"), text("974"), text("768"), text("206"), text("206")}
			t.Findings = findings(r.Findings)
			t.expect(fmt.Sprintf("100 ms: %d opens within 10–22", r.Opens), r.Opens >= 10 && r.Opens <= 22)
			t.expect(fmt.Sprintf("100 ms: %d timed out, %d wasted: nearly every timeout wasted work (within 25 %%)", r.TimedOut, r.Wasted),
				r.TimedOut > 0 && math.Abs(float64(r.Wasted-r.TimedOut)) <= 0.25*float64(r.TimedOut))
		} else {
			t.expect(fmt.Sprintf("1 s: %d opens, %d of %d timed out (under 1 %%)", r.Opens, r.TimedOut, r.Sent), r.Opens == 0 && float64(r.TimedOut) <= 0.01*float64(r.Sent))
		}
		t.Chains = append(t.Chains, r.Chain)
		n := func(v int) Cell { return num(float64(v), "calls", none, "%.0f") }
		t.Rows = append(t.Rows, []Cell{text(attempt.String()), num(float64(r.Opens), "", none, "%.0f"), num(sec(r.Open), "s", none, "%.1f s"),
			n(r.Made), n(r.Rejected), n(r.Sent), n(r.OK), n(r.TimedOut), n(r.Wasted)}, seedRow)
		tl := timeline("C4-"+proto+"-"+attempt.String(), "C4 over "+protoName(proto)+", timeout "+attempt.String(), 20*time.Second, r.Events, r.Marks, nil)
		tl.Caption = fmt.Sprintf("%s calls made by the 20 callers, one mark each, as the table's \"calls made\": %s rejected by the breaker (never sent), %s passed it (the downstream received %s: the table's \"calls sent\").",
			quantity(float64(r.Made), ""), quantity(float64(r.Rejected), ""), quantity(float64(r.Made-r.Rejected), ""), quantity(float64(r.Sent), ""))
		l.report.Timelines = append(l.report.Timelines, tl)
	}
	t.Noise = l.measured(scale)
	t.Notes = append(t.Notes,
		"Calls made count every call of the callers, those the open breaker refused at once (each caller then pauses 10 ms) included; calls sent, those the downstream received.",
		"Calls sent differ from the reference's 974 and 2210 (SEEDS C4): its load was not given, only its shape; here 20 callers call back to back. The shape is the finding: about 16 opens and a fifth of the calls timing out at 100 ms, each a piece of server work wasted; none at 1 s.",
		"Over real sockets a few timed-out calls waste no work (the server answered just as the client gave up, or never got the request) and, at 1 s, a call of the slowest kind (just under 1 s) plus the network can time out; in virtual time (go test -run TestTimeoutBelowTailLatency .) the wasted work equals the timeouts exactly and 1 s never times out.")
	l.add(t)
	return nil
}

// scale is the running experiment's: 1 in a full run, its quick scale
// otherwise.
func (l *lab) scale() float64 {
	if l.full || l.running.quick == 0 {
		return 1
	}
	return l.running.quick
}

// measured is the scheduling noise measured since the running experiment
// started (nil if it runs in virtual time, or nothing measures), its
// allowance in the seed's time: the lateness ÷ scale.
func (l *lab) measured(scale float64) *Noise {
	if l.noise == nil || !l.running.realTime {
		return nil
	}
	if !(scale > 0) {
		scale = 1
	}
	n := l.noise.Take()
	if n.Samples == 0 {
		return nil
	}
	l.report.NoiseMax = max(l.report.NoiseMax, ms(n.Max))
	l.report.NoiseSamples += n.Samples
	return &Noise{Period: ms(n.Period), Samples: n.Samples, P50: ms(n.P50), P99: ms(n.P99), Max: ms(n.Max), Allowance: ms(n.Max) / scale}
}

// add keeps a judged table and prints it; the timelines added since the
// last table are its.
func (l *lab) add(t *Table) {
	if t.Noise == nil {
		t.Noise = l.measured(t.Scale)
	}
	t.judge()
	for _, tl := range l.report.Timelines[l.drawn:] {
		t.Timelines = append(t.Timelines, tl.ID)
	}
	l.drawn = len(l.report.Timelines)
	l.report.Tables = append(l.report.Tables, t)
	l.progress.clear()
	t.print(l.out)
}
