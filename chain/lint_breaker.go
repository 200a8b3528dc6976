package chain

// The rules about a breaker and the retries around or inside it.

import (
	"fmt"
	"math"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/retry"
)

// breaker checks the breaker b, step i: CG001, CG002, CG007, CG009–CG013,
// CG027.
func (l *linter) breaker(i int, b *breaker.Breaker) {
	s := b.Settings()
	// An adapted gobreaker: its settings are unknown, so only the rules of
	// order apply to it.
	known := s.HalfOpenProbes > 0 || s.SkipHalfOpen
	name := b.String()

	// CG001, CG002: retries around or inside the breaker.
	for j, o := range l.steps {
		if o.kind != kindRetry {
			continue
		}
		a := o.rp().Attempts()
		if j < i && o.rx.WhenOpen {
			sum, parts := sumWaits(o.rx.Waits())
			inFlight := ""
			if known {
				inFlight = fmt.Sprintf("; and a request in flight when it opens waits out the open stay (%v) to retry into half-open", s.OpenTimeout)
			}
			l.warn("CG001", "%v retries breaker.ErrOpen (RetryWhenOpen) outside %s: while the breaker is open each request still waits ≈ %v of backoff (%s) before it fails, instead of failing at once (docs/conflicts.md, case 3)%s. Fix: drop RetryWhenOpen, and answer ErrOpen with a fallback if a degraded answer is wanted.",
				o.rp(), name, sum, parts, inFlight)
		}
		if j > i && a > 1 {
			l.retryInside(o.rp(), name, s, known)
		}
		if j < i && a > 1 && known {
			l.budgetOutside(o.rp(), name, s)
			l.rateOfAttempts(o.rp(), name, s)
		}
	}

	// CG004, CG009, CG010: the attempt timeout inside the breaker.
	t, ok := l.innerTimeout(i)
	switch {
	case !ok:
		l.warn("CG009", "%s has no attempt timeout inside it: a call that hangs holds its half-open probe slot until it returns, and a hung downstream never counts as failing. Fix: add timeout.New(d) between the breaker and the call: chain.New(…, breaker, timeout).", name)
	default:
		l.detection(i, name, s, known, t)
		if s.FailureRate > 0 && s.Window > 0 && s.Window < mulSat(2, t) {
			l.warn("CG010", "%s rates failures over a %v window, less than 2 × the %v attempt timeout inside it: a hung call is counted only when its timeout fires, so the window sees few outcomes and the rate swings on each. Fix: a window of at least %v (10 × the timeout is typical).",
				name, s.Window, t, mulSat(2, t))
		}
	}

	if !known {
		return
	}
	// CG012: breaker jitter.
	if r := l.o.DownstreamRecovery; r > 0 && s.OpenTimeout < r && s.MaxOpenTimeout < r {
		rounds := staysUntil(r, s.OpenTimeout, s.MaxOpenTimeout)
		if s.SkipHalfOpen {
			l.warn("CG012", "%s stays open %v but the downstream takes %v to recover: it will go open → closed → open about %d times per outage, each close (SkipHalfOpen: no probes) letting traffic through to a downstream still recovering until a trip rule fires again (breaker jitter). Fix: OpenTimeout ≥ %v, or MaxOpenTimeout ≥ %v so the stay grows.",
				name, s.OpenTimeout, r, rounds-1, r, r)
		} else {
			l.warn("CG012", "%s stays open %v but the downstream takes %v to recover: it will go open → half-open → open about %d times per outage, each round sending up to %d probes to a downstream still recovering (%s; breaker jitter). Fix: OpenTimeout ≥ %v, or MaxOpenTimeout ≥ %v so the stay grows.",
				name, s.OpenTimeout, r, rounds-1, s.HalfOpenProbes, probesPerRound(s), r, r)
		}
	}
	if s.SkipHalfOpen {
		return
	}
	// CG007: the chance that a half-open round passes on a flaky downstream.
	n, k := s.HalfOpenProbes, s.HalfOpenSuccesses
	if p90 := passProbability(n, k, 0.9); p90 < 0.5 {
		l.warn("CG007", "%s closes only when %d of its %d half-open probes succeed: at 90%% downstream success a round passes with probability %.0f%%, at 70%% %.1f%% (docs/breaker.md: a median 25 s to close at 70%% with 10 of 10). Fix: HalfOpenSuccesses below HalfOpenProbes (e.g. %d of %d), or fewer probes.",
			name, k, n, 100*p90, 100*passProbability(n, k, 0.7), max(1, n*7/10), n)
	}
	// CG011: probes sent to a downstream still down.
	if n > 5 {
		l.warn("CG011", "%s admits %d half-open probes: each failed round sends up to %d calls to a downstream that is still down (%s; docs/breaker.md: 2 / 6 / 18 failed probes for 1 / 3 / 10). Fix: 1 to 5 probes; to close reliably on a flaky downstream use HalfOpenSuccesses < HalfOpenProbes rather than more probes.",
			name, n, n, probesPerRound(s))
	}
}

// probesPerRound says how many probes a failed half-open round sends.
func probesPerRound(s breaker.Settings) string {
	n, k := s.HalfOpenProbes, s.HalfOpenSuccesses
	return fmt.Sprintf("%d when that many callers arrive together; a lone caller's probes come one at a time, and the round fails after %d", n, n-k+1)
}

// retryInside is CG002: retry r inside the breaker described by name and s.
func (l *linter) retryInside(r *retry.Policy, name string, s breaker.Settings, known bool) {
	a := r.Attempts()
	n := 0 // failed requests to trip
	switch {
	case !known:
	case s.ConsecutiveFailures > 0:
		n = s.ConsecutiveFailures
	default:
		n = s.MinCalls
	}
	ratio, _, burst, budget := bridge.RetryBudget(r)
	var consequence, load string
	switch {
	case n == 0:
		consequence = fmt.Sprintf("it needs %d× the downstream calls to trip", a)
	case s.ConsecutiveFailures > 0:
		consequence = fmt.Sprintf("with %d consecutive failures to trip it opens after %s%d downstream calls instead of %d", n, upTo(budget), n+retriesFor(n, a, ratio, burst, budget), n)
	default:
		consequence = fmt.Sprintf("its rates need %s%d downstream calls instead of %d (MinCalls) before they can trip", upTo(budget), n+retriesFor(n, a, ratio, burst, budget), n)
	}
	if budget {
		load = fmt.Sprintf("until its retry budget's starting %g tokens are spent; then the budget caps retries at %g%% of calls, so a downstream that is down gets ≈ %.2f× the load, not %d×", burst, 100*ratio, 1+ratio, a)
	} else {
		load = fmt.Sprintf("and a downstream that is down gets %d× the load before the breaker reacts (docs/conflicts.md, case 1: 15 calls instead of 5)", a)
	}
	l.warn("CG002", "%v is inside %s: the breaker sees one outcome per request, 1 failure per %d downstream calls; %s, %s. Fix: put the retry outside the breaker: chain.New(retry, breaker, …).",
		r, name, a, consequence, load)
}

func upTo(budget bool) string {
	if budget {
		return "up to "
	}
	return ""
}

// retriesFor is the retries n failing requests of a attempts make, back to
// back, from a fresh budget (all of them without one).
func retriesFor(n, a int, ratio, burst float64, budget bool) int {
	if !budget {
		return n * (a - 1)
	}
	tokens, capacity, made := burst, max(1, burst), 0
	for range n {
		tokens = min(tokens+ratio, capacity) // the request's deposit
		for range a - 1 {
			if tokens < 1 {
				break
			}
			tokens--
			made++
		}
	}
	return made
}

// budgetOutside is CG013: retry r, outside the breaker, draws from a
// budget, so fewer failing attempts reach the breaker.
func (l *linter) budgetOutside(r *retry.Policy, name string, s breaker.Settings) {
	ratio, perSecond, burst, ok := bridge.RetryBudget(r)
	a := r.Attempts()
	if !ok {
		return
	}
	n := s.ConsecutiveFailures
	rule := fmt.Sprintf("its %d consecutive failures", n)
	if n == 0 {
		n = s.MinCalls
		rule = fmt.Sprintf("the %d calls its rate needs (MinCalls)", n)
	}
	// A spent budget holds less than a token: from none to almost one.
	most, least, without := requestsFor(n, a, ratio, burst, 0, true), requestsFor(n, a, ratio, burst, 1-1e-9, true), requestsFor(n, a, 0, 0, 0, false)
	if least <= without {
		return
	}
	with := fmt.Sprint(most)
	if least != most {
		with = fmt.Sprintf("%d to %d", least, most)
	}
	refill := ""
	if perSecond > 0 {
		refill = fmt.Sprintf(", not counting its %g retries a second", perSecond)
	}
	l.info("CG013", "%v draws its retries from a budget (%g%% of calls, %g tokens to start): once the starting tokens are spent, a downstream that is down sends %s %.2f failing calls per request instead of %d, so the breaker reaches %s after %s failing requests instead of %d%s. The budget is what keeps retries from piling onto an overloaded downstream; this is its cost. Fix, if detection matters more: a larger ratio, or a trip rule that needs fewer calls.",
		r, 100*ratio, burst, name, 1+ratio, a, rule, with, without, refill)
}

// rateOfAttempts is CG027: the failure rate of breaker name, inside retry
// r, is a rate of attempts, and trips when far fewer requests fail.
func (l *linter) rateOfAttempts(r *retry.Policy, name string, s breaker.Settings) {
	a := r.Attempts()
	ofRequests := math.Pow(s.FailureRate, float64(a))
	if s.FailureRate == 0 || s.FailureRate == 1 || ofRequests >= 1.0/3 {
		return
	}
	// A downstream failing a tenth more of the attempts than the rate:
	// the breaker opens on it, though most requests would succeed.
	p := min(1, s.FailureRate+0.1)
	fix := breaker.AttemptFailureRate(breaker.DefaultFailureRate, a) // half the requests
	l.info("CG027", "%s is inside %v and rates attempts, up to %d a request: its FailureRate %g trips when %.1f%% of the requests fail (all their attempts failing, the failures independent), not %g%%. A downstream failing %g%% of the calls opens it, though %.1f%% of the requests would succeed through the retry: on a downstream coming back flaky, it refuses requests most of which would succeed (docs/protection.md: on the ramp, with 3 attempts, 0.79 kept 4–7%% more successes than 0.5). Fix: FailureRate %g (breaker.AttemptFailureRate(0.5, %d): when half the requests fail); ConsecutiveFailures still opens it at once when the downstream goes down.",
		name, r, a, s.FailureRate, 100*ofRequests, 100*s.FailureRate, 100*p, 100*(1-math.Pow(p, float64(a))), fix, a)
}

// requestsFor counts the failing requests of a attempts it takes for n
// failing attempts to reach a breaker inside the retry: every attempt
// without a budget; with one that holds tokens (its starting ones spent),
// the first attempt and the retries its ratio refills.
func requestsFor(n, a int, ratio, burst, tokens float64, budget bool) int {
	capacity, calls := max(1, burst), 0
	for req := 1; ; req++ {
		calls++
		tokens = min(tokens+ratio, capacity)
		for k := 1; k < a && calls < n; k++ {
			if budget {
				if tokens < 1 {
					break
				}
				tokens--
			}
			calls++
		}
		if calls >= n {
			return req
		}
	}
}

// passProbability is the chance that at least k of n probes succeed when
// each does with probability q.
func passProbability(n, k int, q float64) float64 {
	var p float64
	for i := k; i <= n; i++ {
		p += binomial(n, i) * math.Pow(q, float64(i)) * math.Pow(1-q, float64(n-i))
	}
	return p
}

func binomial(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}
