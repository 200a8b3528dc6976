package chain

// The rules about policies met more than once in a chain: the same value
// twice (CG025), two breakers (CG026).

import (
	"fmt"

	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/throttle"
)

// place is a step of the chain or of a chain nested in it, flattened,
// outermost first.
type place struct {
	s      *step
	at     int  // the index, in the linted chain, of the step it is or is in
	nested bool // in a chain nested at step at
}

// places flattens steps, and the steps of the chains nested in them.
func places(steps []step) []place {
	var out []place
	var walk func(steps []step, at int, nested bool)
	walk = func(steps []step, at int, nested bool) {
		for i := range steps {
			s := &steps[i]
			k := at
			if !nested {
				k = i
			}
			if c, ok := s.p.(*Chain); ok && c != nil {
				walk(c.steps, k, true)
				continue
			}
			out = append(out, place{s: s, at: k, nested: nested})
		}
	}
	walk(steps, 0, false)
	return out
}

func (p place) String() string {
	if p.nested {
		return fmt.Sprintf("#%d (in a nested chain)", p.at+1)
	}
	return fmt.Sprintf("#%d", p.at+1)
}

// twice is CG025 and CG026.
func (l *linter) twice() {
	ps := places(l.steps)
	seen := make(map[Policy]bool, len(ps))
	for i, a := range ps {
		if seen[a.s.p] {
			continue
		}
		for _, b := range ps[i+1:] {
			if b.s.p == a.s.p {
				seen[a.s.p] = true
				if what := doubleCount(a.s); what != "" {
					l.fail("CG025", "%v is given twice in this chain, as policies %v and %v: each call goes through it twice, and its state counts it twice: %s. Fix: a policy of its own for each place (call its package's New again), or keep one place.",
						a.s.p, a, b, what)
				}
				break
			}
		}
	}
	// CG026: two breakers, one inside the other.
	var outer *place
	between := false // a retry or a hedge between outer and the next breaker
	for i := range ps {
		p := &ps[i]
		switch p.s.kind {
		case kindRetry, kindHedge:
			between = true
		case kindBreaker:
			if outer != nil && outer.s.p != p.s.p {
				l.twoBreakers(*outer, *p, between)
			}
			outer, between = p, false
		}
	}
}

// doubleCount says, in numbers, what counting each call twice does to the
// policy of step s; "" for a policy with no such state (a fixed timeout, a
// fallback, a retry without a budget: CG006 covers its attempts), or one
// the chain does not know.
func doubleCount(s *step) string {
	switch s.kind {
	case kindBreaker:
		st := s.bp().Settings()
		if st.HalfOpenProbes == 0 && !st.SkipHalfOpen { // an adapted gobreaker
			return "each outcome counted twice, its trip rules reach their counts after half the failing calls, and a half-open call takes 2 of its probe slots"
		}
		what := ""
		if n := st.ConsecutiveFailures; n > 0 {
			what = fmt.Sprintf("a failure counted twice: ConsecutiveFailures %d opens after %d failing calls", n, (n+1)/2)
		}
		if st.FailureRate > 0 || st.SlowCallRate > 0 {
			if what != "" {
				what += "; "
			}
			what += fmt.Sprintf("its window holds 2 outcomes per call: MinCalls %d is reached after %d calls", st.MinCalls, (st.MinCalls+1)/2)
		}
		if st.SkipHalfOpen {
			return what
		}
		n, k := st.HalfOpenProbes, st.HalfOpenSuccesses
		switch {
		case n == 1:
			what += "; and a half-open call takes its only half-open probe slot at one place and is refused at the other, a failure: the breaker never closes"
		case 2*((k+1)/2) > n:
			what += fmt.Sprintf("; and a half-open call takes 2 of its %d probe slots, so the last of the %d successes it needs finds no slot: refused, a failure, and the breaker never closes", n, k)
		default:
			what += fmt.Sprintf("; and a half-open call takes 2 of its %d probe slots: %d successful calls close it, not %d", n, (k+1)/2, k)
		}
		return what
	case kindThrottle:
		r := s.p.(*throttle.Throttle).Settings().MaxRejectionRate
		return fmt.Sprintf("each call is counted twice and may be refused at each place: at its cap (%s%% refused) %s%% of calls are", percent(r), percent(1-(1-r)*(1-r)))
	case kindLimit:
		st := s.p.(*limit.Limiter).Settings()
		return fmt.Sprintf("each call takes 2 of its slots: at its limit of %d (to start) it is full with %d calls, and it measures each call twice%s", st.InitialLimit, st.InitialLimit/2, queueTwice(st.MaxQueue))
	case kindBulkhead:
		st := s.p.(*limit.Bulkhead).Settings()
		return fmt.Sprintf("each call takes 2 of its %d slots: it is full with %d calls%s", st.MaxConcurrent, st.MaxConcurrent/2, queueTwice(st.MaxQueue))
	case kindHedge:
		n := s.h.hx.MaxHedges + 1
		return fmt.Sprintf("each attempt the outer place makes is hedged again at the inner one: up to %d × %d = %d attempts per call, and its %s%% budget counts each call twice", n, n, n*n, percent(s.h.hx.Budget))
	case kindRetry:
		if _, _, _, ok := bridge.RetryBudget(s.p); !ok {
			return ""
		}
		a := s.rx.Attempts
		return fmt.Sprintf("up to %d × %d = %d attempts per request, and its budget credited twice per request and drawn from at both places", a, a, a*a)
	case kindTimeout:
		if !s.tx.Adaptive {
			return ""
		}
		return "its latency tracker records each call twice, once per place, and one timeout follows both: where the places see different calls (a retry between them), whole requests and attempts are mixed"
	}
	return ""
}

func queueTwice(maxQueue int) string {
	if maxQueue == 0 {
		return ""
	}
	return "; and in its queue a call holding one slot waits for its second behind others doing the same"
}

// twoBreakers is CG026: breaker b inside breaker a; between: a retry or a
// hedge lies between them.
func (l *linter) twoBreakers(a, b place, between bool) {
	as, bs := a.s.bp().Settings(), b.s.bp().Settings()
	na, nb := as.ConsecutiveFailures, bs.ConsecutiveFailures
	known := (as.HalfOpenProbes > 0 || as.SkipHalfOpen) && (bs.HalfOpenProbes > 0 || bs.SkipHalfOpen)
	var what string
	switch {
	case between:
		what = "A retry or a hedge between them makes the outer see one outcome per request, the inner one per attempt (CG002, CG017); the inner's rejections (breaker.ErrOpen) count as failures to the outer."
	case !known || na == 0 || nb == 0:
		what = "On an outage the one whose rules need fewer failures opens first; its rejections (breaker.ErrOpen) count as failures to the outer, and the outer closes only once a probe gets through the inner."
	case nb < na:
		what = fmt.Sprintf("On an outage the inner opens after %d failing calls; its rejections (breaker.ErrOpen) count as failures to the outer, which opens %d calls later, after %d as alone, and closes only once a probe gets through the inner: a half-open round of the outer while the inner is open (%v) fails on its rejections.",
			nb, na-nb, na, bs.OpenTimeout)
	case nb == na:
		what = fmt.Sprintf("On an outage both open after %d failing calls; the outer closes only once a probe gets through the inner, whose rejections (breaker.ErrOpen) count as failures to it.", na)
	default:
		what = fmt.Sprintf("On an outage the outer opens first, after %d failing calls, with %d of the inner's %d counted: the inner sees only what the outer admits, its half-open probes, and opens if %d more of them fail; its rejections (breaker.ErrOpen) count as failures to the outer.",
			na, na, nb, nb-na)
	}
	l.info("CG026", "%v (outer, policy %v) and %v (inner, policy %v) judge the same calls: the inner sees every attempt the outer admits. %s Nothing is counted twice: a breaker shared by many chains around one of each chain's own (one for the whole dependency, one per host) is what two breakers are for. Fix, if one breaker was meant: keep one, with both trip rules.",
		a.s.p, a, b.s.p, b, what)
}

// fail adds a finding of severity error.
func (l *linter) fail(code, format string, args ...any) {
	l.out = append(l.out, Finding{Code: code, Severity: SeverityError, Message: fmt.Sprintf(format, args...)})
}
