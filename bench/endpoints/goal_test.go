package endpoints

import (
	"fmt"
	"time"
)

// The goal for the per-endpoint arms, with one of ten backends
// failing, hanging or slow.
const (
	goalSuccess = 0.999                  // of the calls started in the bad phase
	goalP99Over = 50 * time.Millisecond  // the bad phase's p99 over the healthy p99 (the control arm's, same phase)
	goalShare   = 0.05                   // #0's calls after the first second, of its fair share
	goalEject   = time.Second            // from the fault's start
	goalReadmit = 2 * time.Second        // from the heal
	slack       = 100 * time.Millisecond // the test's allowance on a time, beside the noise's p99
	// notIdempotentFloor is the success the test wants of the calls not
	// retried (the goal's is goalSuccess; today's Standard gets 90 %).
	notIdempotentFloor = 0.99
)

// idempotent reports whether arm name's calls may be retried.
func idempotent(name string) bool { return name != armEp && name != armEpPost && name != armStd }

// verdict is one check of the goal: held is the goal as the issue states
// it (the report's), tolerated the same with the test's allowance for
// the run's scheduling noise and the fault's edge (the test's).
// structural marks a verdict that no timing moves (the cap, the
// breaker's opening, the client's refusals): the test holds it under the
// race detector too.
type verdict struct {
	what, detail    string
	held, tolerated bool
	structural      bool
}

// goalApplies: the goal covers the per-endpoint arms with one backend
// failing, hanging or slow (flapping is reported, not held).
func (r *caseResult) goalApplies(a *armResult) bool {
	return isNew(a.name) && !r.c.all && r.c.fault != modeFlap
}

// goal checks arm a against the goal.
func (r *caseResult) goal(a *armResult) []verdict {
	if r.c.all {
		return r.allFailGoal(a)
	}
	if !r.goalApplies(a) {
		return nil
	}
	n := r.run.noise[phaseBad]
	late := n.P99 + slack
	b := a.ph[phaseBad]
	var out []verdict
	// The calls in flight when the fault starts were sent before anything
	// could know: one a caller. A call that is not idempotent is not
	// retried: the calls that judge #0 before its ejection and the probes
	// that find it still bad are lost to their callers (and so are those
	// Standard's adaptive attempt timeout cuts), so the test holds those
	// arms to notIdempotentFloor, and the report to the goal.
	edge := float64(callers) / float64(max(b.started, 1))
	need, allow := goalSuccess-edge, fmt.Sprintf("the test allows one call a caller, %.2f %%", 100*edge)
	if !idempotent(a.name) {
		need, allow = notIdempotentFloor, fmt.Sprintf("the test wants %.0f %% of calls not retried", 100*notIdempotentFloor)
	}
	out = append(out, verdict{
		what:      fmt.Sprintf("≥ %.1f %% of the bad phase's calls succeed", 100*goalSuccess),
		held:      b.rate() >= goalSuccess,
		tolerated: b.rate() >= need,
		detail:    fmt.Sprintf("%d of %d, %.2f %% (%s)", b.ok, b.started, 100*b.rate(), allow),
	})
	healthy := r.healthyP99()
	out = append(out, verdict{
		what:      fmt.Sprintf("p99 within the healthy p99 + %v", goalP99Over),
		held:      b.p99 <= healthy+goalP99Over,
		tolerated: b.p99 <= healthy+goalP99Over+late,
		detail:    fmt.Sprintf("p99 %s, healthy p99 %s (the control's, same phase; the test allows %s more)", ms(b.p99), ms(healthy), ms(late)),
	})
	fair := float64(a.toAll) / backends
	out = append(out, verdict{
		what:      fmt.Sprintf("#0 receives ≤ %.0f %% of its fair share after the first second", 100*goalShare),
		held:      a.share <= goalShare,
		tolerated: float64(a.to0) <= goalShare*fair+callers,
		detail:    fmt.Sprintf("%d calls, %.1f %% of its fair share %.0f (the test allows one call a caller more)", a.to0, 100*a.share, fair),
	})
	out = append(out, verdict{
		what:       "no healthy backend is refused",
		held:       a.refusals == 0 && a.healthyEjections() == 0,
		tolerated:  a.refusals == 0 && a.healthyEjections() <= 1, // a stall of the host's may judge one slow
		structural: true,

		detail: fmt.Sprintf("%d calls refused by the client in the bad phase; ejections of healthy backends: %d in the warm-up, %d in the bad phase, %d healed (the test allows one)",
			a.refusals, a.healthyEjected[phaseWarm], a.healthyEjected[phaseBad], a.healthyEjected[phaseHealed]),
	})
	out = append(out, verdict{
		what:      fmt.Sprintf("#0 ejected within %v of the fault's start", goalEject),
		held:      a.ejected != none && a.ejected <= goalEject,
		tolerated: a.ejected != none && a.ejected <= goalEject+late,
		detail:    fmt.Sprintf("the policy ejected it after %s; its requests paused from %s (servers)", when(a.ejected), when(a.quiet)),
	})
	out = append(out, verdict{
		what:      fmt.Sprintf("#0 readmitted within %v of the heal", goalReadmit),
		held:      a.readmitted != none && a.readmitted <= goalReadmit,
		tolerated: a.readmitted != none && a.readmitted <= goalReadmit+late,
		detail:    fmt.Sprintf("the policy readmitted it after %s; it had half its fair share again from %s (servers)", when(a.readmitted), when(a.back)),
	})
	return out
}

// healthyP99 is the healthy p99 the goal measures against: the control
// arm's (ten healthy backends) in the bad phase, under the same load of
// the host as the other arms; without a control, the warm-up's p99 of
// every arm, the highest.
func (r *caseResult) healthyP99() time.Duration {
	if c := r.arm(armControl); c != nil {
		return c.ph[phaseBad].p99
	}
	var p time.Duration
	for _, a := range r.arms {
		p = max(p, a.ph[phaseWarm].p99)
	}
	return p
}

// allFailGoal: with every backend failing, at most the max ejection
// percent (10 % of ten: one) is ejected at once, and the per-method (or
// per-host) breaker opens as today.
func (r *caseResult) allFailGoal(a *armResult) []verdict {
	var out []verdict
	if a.policy {
		ok := a.most <= 1 && a.polled <= 1
		out = append(out, verdict{
			what:       "at most 1 endpoint of 10 ejected at once (max ejection 10 %)",
			held:       ok,
			tolerated:  ok,
			structural: true,
			detail:     fmt.Sprintf("most ejected at once: %d by the policy's changes, %d by its Statuses read every 10 ms; %d openings kept from ejecting by the cap", a.most, a.polled, a.capped),
		})
	}
	opened := a.opens[phaseBad] > 0
	out = append(out, verdict{
		what:       "the per-method / per-host breaker opens",
		held:       opened,
		tolerated:  opened,
		structural: true,
		detail:     fmt.Sprintf("%d openings in the bad phase, the first after %s", a.opens[phaseBad], when(a.firstOpen)),
	})
	return out
}

func when(d time.Duration) string {
	switch {
	case d == none:
		return "never"
	case d < 0:
		return "–"
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
