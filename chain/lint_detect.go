package chain

// CG004: how long a breaker takes to notice a downstream that hangs.

import (
	"fmt"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/bridge"
)

// detection is CG004 for the breaker b (step i, described by name, its
// settings s; known: its settings are its own, not an adapted
// gobreaker's), with the attempt timeout inside it, of at most t. A hung
// attempt is a failure when t fires; when a deadline outside the
// breaker cuts it first (the callers', Options.CallerDeadline, or an outer
// timeout's), only once it has run the timeout's patience, or it is
// neutral. The rule warns when no hung attempt can ever count, and when,
// at one caller, the consecutive failures to trip take longer than
// Options.MaxDetection.
func (l *linter) detection(i int, name string, s breaker.Settings, known bool, t time.Duration) {
	inner, _ := l.innerTimeoutPolicy(i)
	tx := bridge.TimeoutOf(inner)
	patience := bridge.TimeoutPatience(inner)
	cut, by, outside := l.cutOf(i)
	per := t // when a hung attempt becomes a failure
	if cut > 0 && cut < t {
		if cut < patience {
			l.neverCounted(i, name, t, patience, patienceOf(tx), cut, by, outside)
			return
		}
		per = cut
	}
	n := s.ConsecutiveFailures
	if !known || n == 0 {
		return // an adapted gobreaker's rules are unknown; a rate rule's window is CG010's
	}
	detect := max(mulSat(n, per), s.ConsecutiveFor)
	if detect <= l.o.MaxDetection {
		return
	}
	if s.ConsecutiveFor >= mulSat(n, per) {
		l.warn("CG004", "%s trips after %d consecutive failures over at least %v: a hung downstream is detected only after %v, each call holding its caller up to %v meanwhile. Fix: a shorter ConsecutiveFor, for detection within %v.",
			name, n, s.ConsecutiveFor, s.ConsecutiveFor, per, l.o.MaxDetection)
		return
	}
	held := fmt.Sprintf("the attempt timeout inside it is %v", t)
	if per != t {
		held = fmt.Sprintf("the attempt timeout inside it is %v, but %s cuts each hung attempt at %v, which then counts as a failure (it has run past %v, %s)",
			t, by, per, patience, patienceOf(tx))
	}
	l.warn("CG004", "%s trips after %d consecutive failures and %s: a hung downstream is detected only after %d × %v = %v at 1 caller, each call holding its caller %v meanwhile (docs/conflicts.md, case 2: 15 s at 3 s × 5). Fix: a shorter attempt timeout (still above the healthy tail latency) or fewer failures to trip, for detection within %v.",
		name, n, held, n, per, detect, per, l.o.MaxDetection)
}

// neverCounted is CG004 when the deadline outside the breaker (cut, said
// by by) ends every hung attempt before it has run the timeout's patience:
// no hung attempt is ever a failure. outside is the index of a retry that
// the deadline also bounds (-1: none).
func (l *linter) neverCounted(i int, name string, t, patience time.Duration, why string, cut time.Duration, by string, outside int) {
	retries := ""
	if outside >= 0 {
		if r := l.steps[outside].rp(); r.Attempts() > 1 {
			retries = fmt.Sprintf("; %v makes its first attempt only, the deadline gone before a second (%d of its %d attempts never made)", r, r.Attempts()-1, r.Attempts())
		}
	}
	l.warn("CG004", "%s never sees a hung downstream fail: a hung attempt counts as a failure when the %v attempt timeout inside it fires, or, cut by a deadline outside it, once it has run %v (%s); %s ends every hung attempt at %v, before either, so the breaker never opens on a downstream that hangs, and every request waits out its whole %v%s. Fix: an attempt timeout below %v (still above the healthy tail latency), e.g. timeout.Adaptive; or declare the tail, timeout.Latency(0.99, p99) with a p99 under %v, so that a cut attempt that has run that long counts as a failure.",
		name, t, patience, why, by, cut, cut, retries, cut, cut)
}

// cutOf returns the soonest deadline outside the breaker at step i: the
// callers' (Options.CallerDeadline) or an outer timeout's, what it is, and
// the index of a retry outside the breaker that it bounds too (-1: none).
func (l *linter) cutOf(i int) (cut time.Duration, by string, retry int) {
	retry = -1
	from := i // the deadline bounds the retries outside this step
	if d := l.o.CallerDeadline; d > 0 {
		cut, by, from = d, fmt.Sprintf("the callers' %v deadline (Options.CallerDeadline)", d), 0
	}
	for k := i - 1; k >= 0; k-- {
		s := l.steps[k]
		if s.kind != kindTimeout {
			continue
		}
		if d := s.tx.Longest(); cut == 0 || d < cut {
			cut, by, from = d, fmt.Sprintf("%v outside it", s.tp()), k
		}
	}
	for k := from; k < i; k++ {
		if l.steps[k].kind == kindRetry {
			return cut, by, k
		}
	}
	return cut, by, -1
}

// patienceOf says where a timeout's patience comes from.
func patienceOf(tx *bridge.Timeout) string {
	switch {
	case len(tx.Declared) > 0:
		q := tx.Declared[len(tx.Declared)-1]
		return fmt.Sprintf("its declared p%s", percent(q.Q))
	case tx.Adaptive:
		return "its adaptive estimate of a healthy answer"
	}
	return "half the timeout, as no healthy latency is declared"
}
