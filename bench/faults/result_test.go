package faults

import (
	"fmt"
	"slices"
	"time"

	"github.com/callguard/callguard/internal/scenario"
)

// phaseStats are an arm's calls that started in one phase.
type phaseStats struct {
	started, ok, open, rejected int
	p50, p99                    time.Duration // of the successful calls
	failP50                     time.Duration // of the others
	okDur                       []time.Duration
}

// armResult is one arm of a cell.
type armResult struct {
	name     string
	ph       [phases]phaseStats
	received [phases]int64 // attempts the server received, by the phase their call started in
	opens    [phases]int   // breaker opens, by the phase they happened in
	firstOK  time.Duration // from the heal to the first success that ended after it; -1: none
	// recovered is the successes that ended in the recovery window,
	// whenever they started: a call that started during the fault and
	// succeeded after the heal counts, as it kept its caller busy.
	recovered int
}

// cellResult is a cell's measurements and the invariant's verdicts.
type cellResult struct {
	cell     cell
	note     string
	healthy  time.Duration
	windows  [phases]time.Duration // how long each phase lasted
	noise    [phases]scenario.Noise
	spread   time.Duration
	arms     []armResult
	verdicts []verdict
}

// verdict is one check of the invariant.
type verdict struct {
	what, detail string
	held         bool
}

func summarize(c cell, run *cellRun) *cellResult {
	r := &cellResult{cell: c, note: run.env.note, healthy: run.healthy, noise: run.noise, spread: run.env.spread}
	r.windows = [phases]time.Duration{run.fault, run.heal - run.fault, run.end - run.heal}
	for i, name := range armsOf(c.proto) {
		a := armResult{name: name, firstOK: -1}
		if i < len(run.received) {
			a.received = run.received[i]
		}
		var fails [phases][]time.Duration
		for _, k := range run.calls[i] {
			p := &a.ph[k.phase]
			p.started++
			d := k.end - k.start
			switch k.how {
			case endOK:
				p.ok++
				p.okDur = append(p.okDur, d)
				if k.end >= run.heal && (a.firstOK < 0 || k.end-run.heal < a.firstOK) {
					a.firstOK = k.end - run.heal
				}
				if k.end >= run.heal && k.end < run.end {
					a.recovered++
				}
				continue
			case endOpen:
				p.open++
			case endRejected:
				p.rejected++
			}
			fails[k.phase] = append(fails[k.phase], d)
		}
		for ph := range a.ph {
			p := &a.ph[ph]
			slices.Sort(p.okDur)
			slices.Sort(fails[ph])
			p.p50, p.p99, p.failP50 = quantile(p.okDur, 0.5), quantile(p.okDur, 0.99), quantile(fails[ph], 0.5)
		}
		for _, at := range run.opens[i] {
			switch {
			case at < run.fault:
				a.opens[phaseWarm]++
			case at < run.heal:
				a.opens[phaseFault]++
			default:
				a.opens[phaseRecovery]++
			}
		}
		r.arms = append(r.arms, a)
	}
	r.verdicts = r.check()
	return r
}

func (r *cellResult) arm(name string) *armResult {
	for i := range r.arms {
		if r.arms[i].name == name {
			return &r.arms[i]
		}
	}
	return nil
}

// The invariant: standard's calls succeed at least doNoHarm times as often
// as plain's, less the noise's tolerance, in the fault and in the
// recovery. It is a rate, successes over the calls started in the phase:
// each call is what a user waits for, and in a closed loop the count of
// successes also follows how long each call takes (a retry's wait makes
// fewer, surer calls; a call that fails at once lets its caller start
// another at once), so counts are reported beside it, not held to it.
const doNoHarm = 0.98

// tolerance is the share of standard's calls in phase ph that the run's
// scheduling noise and the phase's edge could fail in one arm and not the
// other: plain's successes that ended within the noise's p99 of the
// deadline (a late wake-up could have cut them), as a share of plain's
// calls, plus one call per caller of standard's (the calls in flight when
// the fault begins were sent under the healthy regime's settings).
func (r *cellResult) tolerance(ph int) float64 {
	s, p, n := r.arm(armStandard).ph[ph], r.arm(armPlain).ph[ph], r.noise[ph]
	if p.started == 0 || s.started == 0 {
		return 0
	}
	near := len(p.okDur) - func() int {
		i, _ := slices.BinarySearch(p.okDur, deadline-n.P99)
		return i
	}()
	return float64(near)/float64(p.started) + float64(callers)/float64(s.started)
}

func (r *cellResult) check() []verdict {
	std, plain := r.arm(armStandard), r.arm(armPlain)
	var out []verdict
	phs := []int{phaseFault, phaseRecovery}
	if r.cell.fault.protect {
		// Where protection matters (a blackhole, a dial that hangs, an
		// outage, a pause) the chain is held to protecting: no more calls
		// to the server than plain's, failing fast, a first success within
		// recoveryBound of the heal (a breaker that opened cannot see the
		// heal before its next probe). plain's few successes there are
		// calls that began before the heal and were answered after it.
		phs = nil
	}
	for _, ph := range phs {
		s, p := std.ph[ph], plain.ph[ph]
		if p.ok == 0 || s.started == 0 {
			continue // plain does not succeed: nothing to hold to
		}
		sRate, pRate := float64(s.ok)/float64(s.started), float64(p.ok)/float64(p.started)
		tol := r.tolerance(ph)
		need := doNoHarm*pRate - tol
		out = append(out, verdict{
			what: "do no harm, " + phaseNames[ph],
			held: sRate >= need,
			detail: fmt.Sprintf("calls started in it that succeeded: standard %d of %d (%.1f %%), plain %d of %d (%.1f %%): needs ≥ %.1f %% (%.2f × %.1f %% − noise tolerance %.1f %%)",
				s.ok, s.started, 100*sRate, p.ok, p.started, 100*pRate, 100*need, doNoHarm, 100*pRate, 100*tol),
		})
	}
	if r.cell.fault.protect {
		s, p := std.received[phaseFault], plain.received[phaseFault]
		// One attempt a caller may be on its way when the fault ends (sent
		// before the heal, held by the client until its connection was
		// made, answered after it): not a call the fault's server took.
		out = append(out, verdict{
			what:   "no more calls to the server than plain",
			held:   s <= p+callers,
			detail: fmt.Sprintf("the server received %d attempts of standard's calls started during the fault, %d of plain's (allowed: %d more, one a caller across the heal)", s, p, callers),
		})
		out = append(out, verdict{
			what:   fmt.Sprintf("first success within %v of the heal", recoveryBound),
			held:   std.firstOK >= 0 && std.firstOK <= recoveryBound,
			detail: fmt.Sprintf("standard %s, plain %s", firstOK(std.firstOK), firstOK(plain.firstOK)),
		})
	}
	if r.cell.fault.failFast {
		s := std.ph[phaseFault]
		failed := s.started - s.ok
		out = append(out, verdict{
			what:   fmt.Sprintf("fail fast (median failed call ≤ %v)", failFastBound),
			held:   failed == 0 || s.failP50 <= failFastBound,
			detail: fmt.Sprintf("standard's %d failed calls: median %v; plain's: %v", failed, ms(s.failP50), ms(plain.ph[phaseFault].failP50)),
		})
	}
	return out
}

var phaseNames = [phases]string{"warm-up", "fault", "recovery"}

// failures are the verdicts that did not hold, each with its numbers.
func (r *cellResult) failures() []string {
	var out []string
	for _, v := range r.verdicts {
		if !v.held {
			out = append(out, fmt.Sprintf("%s: %s: %s", r.cell.name(), v.what, v.detail))
		}
	}
	return out
}

func firstOK(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return ms(d)
}

// ms prints d in milliseconds, to a tenth below 10 ms.
func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}
