package chain

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/throttle"
)

// hedge lints the hedge step i.
func (l *linter) hedge(i int) {
	s := l.steps[i]
	h := s.h.hx
	n := h.MaxHedges + 1
	var budget bool
	for j := 0; j < i; j++ {
		o := l.steps[j]
		switch o.kind {
		case kindRetry:
			if _, _, _, ok := bridge.RetryBudget(o.p); ok {
				budget = true
			}
		case kindBreaker:
			// CG017: a hedge inside a breaker.
			l.warn("CG017", "%v is inside %v: the breaker sees one outcome for up to %d attempts (a slow attempt a hedge beat is never counted, so a downstream that slows down does not trip it), and in half-open one probe becomes up to %d calls. Fix: put the hedge outside the breaker: retry → hedge → breaker → attempt timeout.",
				s.p, o.p, n, n)
		}
	}
	// CG016: a hedge outside a retry.
	for j := i + 1; j < len(l.steps); j++ {
		if o := l.steps[j]; o.kind == kindRetry {
			a := o.rx.Attempts
			l.warn("CG016", "%v wraps %v: every attempt of the retry, and its waits, run once per hedge: up to %d × %d = %d downstream calls per request, and a hedge starts the retries over. Fix: put the hedge inside the retry: retry → hedge → breaker → attempt timeout.",
				s.p, o.p, n, a, n*a)
			break
		}
	}
	// CG023: hedging, and retries without a budget.
	if !budget {
		for j := range l.steps {
			if o := l.steps[j]; o.kind == kindRetry {
				if _, _, _, ok := bridge.RetryBudget(o.p); !ok {
					l.warn("CG023", "%v hedges and %v retries without a retry budget: the hedge's budget caps its extra load at %s%%, but a downstream that slows down and then fails gets up to %d attempts per request from the retry. Fix: retry.WithBudget(retry.NewBudget(0.1, 10)).",
						s.p, o.p, percent(h.Budget), o.rx.Attempts*n)
					break
				}
			}
		}
	}
	// CG019: a hedge delay below the declared median.
	if d, q, ok := l.declaredAbove(i, h.Delay()); ok && h.Quantile == 0 {
		l.warn("CG019", "%v hedges after %v, below the downstream's declared p%s of %v: over %s%% of healthy calls run past the delay, so the hedge budget (%s%%) is spent on ordinary calls and none is left for the slow ones it is for. Fix: a delay near the healthy p95, or hedge.Settings{Quantile: 0.95}.",
			s.p, h.Delay(), percent(q), d, percent(1-q), percent(h.Budget))
	}
	// CG018: the chain hedges every call it is given.
	l.info("CG018", "%v hedges every call this chain runs: hedge only idempotent calls. The gRPC and HTTP adapters of this kit hedge only the calls they would retry (idempotent methods); a chain's own Do hedges them all. Fix: call Do only for idempotent work, or run this chain through grpcmw (with its idempotent methods declared) or httpmw.", s.p)
}

// declaredAbove returns the lowest healthy latency quantile, up to the
// median, declared by a timeout inside step i, that is above d.
func (l *linter) declaredAbove(i int, d time.Duration) (time.Duration, float64, bool) {
	for _, s := range l.steps[i+1:] {
		if s.kind != kindTimeout {
			continue
		}
		for _, q := range s.tx.Declared {
			if q.Q <= 0.5 && q.Latency > d {
				return q.Latency, q.Q, true
			}
		}
	}
	return 0, 0, false
}

// throttle lints the throttle step i.
func (l *linter) throttle(i int) {
	t := l.steps[i].p.(*throttle.Throttle)
	s := t.Settings()
	// CG021: a throttle inside a breaker.
	for j := 0; j < i; j++ {
		o := l.steps[j]
		if o.kind != kindBreaker {
			continue
		}
		bs := o.bp().Settings()
		r := min(s.MaxRejectionRate, 0.999)
		probes := fmt.Sprintf("a half-open probe the throttle refuses proves nothing, so the breaker stays half-open until the throttle's %v window forgets the outage", s.Window)
		if bs.SkipHalfOpen {
			probes = fmt.Sprintf("the breaker closes at the end of each open stay (no half-open) into a throttle that goes on refusing up to %s%% of calls until its %v window forgets the outage", percent(s.MaxRejectionRate), s.Window)
		}
		l.warn("CG021", "%v is inside %v: both shed load, and the throttle acts on what the breaker lets through. The breaker never counts the calls the throttle refuses (local rejections are neutral): at the throttle's cap (%s%% refused: 1 call in %d reaches its rules), %s, and %s. Fix: the throttle outside the breaker: retry → throttle → breaker → attempt timeout; the breaker acts first on an outage (its rejections are neutral to the throttle), the throttle sheds a fraction under an overload the breaker's rules do not reach.",
			t, o.p, percent(s.MaxRejectionRate), throttled(1, r), tripRulesThrottled(bs, r), probes)
		break
	}
}

// limit lints the limiter or bulkhead step i, which waits up to maxWait
// in a queue of maxQueue (0: until its caller's context ends).
func (l *linter) limit(i int, maxQueue int, maxWait time.Duration) {
	p := l.steps[i].p
	_, adaptive := p.(*limit.Limiter)
	inside := false
	for j := 0; j < i; j++ {
		if o := l.steps[j]; o.kind == kindRetry {
			inside = true // its canonical place (docs/ordering.md); CG020, which said so, is retired
			break
		}
	}
	// CG024: outside a retry.
	if !inside {
		for j := i + 1; j < len(l.steps); j++ {
			o := l.steps[j]
			if o.kind != kindRetry {
				continue
			}
			what := "a request holds its slot through every attempt and every backoff wait, so the limit counts waits as load"
			if adaptive {
				what = "its round trips are whole requests, retries and backoff waits included, not the downstream's latency: when 20 % of answers hang, each retried request looks ten times slower than an answer, and the limit judges the downstream by that (docs/overload.md: where they go in a chain)"
			}
			l.warn("CG024", "%v wraps %v: %s. Fix: the limit inside the retry, retry → limit → breaker → attempt timeout, so each attempt takes a slot and is measured alone.",
				p, o.p, what)
			break
		}
	}
	// CG022: a queue wait as long as an attempt.
	if maxQueue == 0 {
		return
	}
	if d, ok := l.innerTimeout(i); ok && (maxWait == 0 || maxWait >= d) {
		wait := "until the caller's deadline"
		if maxWait > 0 {
			wait = "up to " + maxWait.String()
		}
		l.warn("CG022", "%v queues calls %s for a slot, at least as long as the %v an attempt may run inside it: a queue that full is a standing queue, not a burst it absorbs, and the calls it admits late have spent their callers' time waiting. Fix: a MaxWait well below %v (a few typical latencies), so an overload is refused at once and the callers can go elsewhere.",
			p, wait, d, d)
	}
}

// throttled is how many calls reach a throttle that refuses the share r of
// them for n to get through.
func throttled(n int, r float64) int {
	return int(math.Ceil(math.Round(float64(n)/(1-r)*1e6) / 1e6))
}

// tripRulesThrottled says, for each trip rule of a breaker with settings
// s, how many calls it takes to see what it needs when a throttle inside
// refuses the share r of them.
func tripRulesThrottled(s breaker.Settings, r float64) string {
	var parts []string
	if n := s.ConsecutiveFailures; n > 0 {
		parts = append(parts, fmt.Sprintf("its %d consecutive failures take %d calls to arrive", n, throttled(n, r)))
	}
	var rates string
	switch {
	case s.FailureRate > 0 && s.SlowCallRate > 0:
		rates = "failure-rate and slow-call-rate"
	case s.FailureRate > 0:
		rates = "failure-rate"
	case s.SlowCallRate > 0:
		rates = "slow-call-rate"
	}
	switch {
	case rates == "":
	case s.WindowCalls > 0 && s.MinCalls >= s.WindowCalls:
		parts = append(parts, fmt.Sprintf("its %s window of the last %d calls spans %d calls, all needed before it can trip", rates, s.WindowCalls, throttled(s.WindowCalls, r)))
	case s.WindowCalls > 0:
		parts = append(parts, fmt.Sprintf("its %s window of the last %d calls spans %d calls, and needs %d to see its %d (MinCalls)", rates, s.WindowCalls, throttled(s.WindowCalls, r), throttled(s.MinCalls, r), s.MinCalls))
	default:
		parts = append(parts, fmt.Sprintf("its %s window (%v) needs %d calls to see its %d (MinCalls)", rates, s.Window, throttled(s.MinCalls, r), s.MinCalls))
	}
	if len(parts) == 0 { // an adapted gobreaker: its rules are unknown
		return fmt.Sprintf("its trip rules (an adapted gobreaker's, unknown to the lint) see 1 outcome per %d calls", throttled(1, r))
	}
	return strings.Join(parts, ", and ")
}
