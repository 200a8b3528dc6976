package chain

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/timeout"
)

// Rule describes one lint rule.
type Rule struct {
	Code    string
	Summary string
}

// Rules returns the lint rules, by code. Codes are stable: a code is never
// reused for another rule.
func Rules() []Rule {
	return []Rule{
		{"CG001", "retry outside a breaker keeps retrying when it is open (RetryWhenOpen): backoff waits for nothing"},
		{"CG002", "retry inside a breaker: the breaker sees one failure per request, not per call, and opens late"},
		{"CG003", "timeout at or below a declared healthy latency quantile up to p99: ≥ 1 % of healthy calls time out"},
		{"CG004", "attempt timeout × failures to trip too slow: a hung downstream is detected late"},
		{"CG005", "overall timeout too short for the attempts and waits of the retry it wraps"},
		{"CG006", "nested retries multiply attempts"},
		{"CG007", "half-open closes only if (almost) every probe succeeds: unlikely on a flaky downstream (q^N)"},
		{"CG008", "fallback inside a retry or breaker hides failures from them; inside a timeout it cannot answer it"},
		{"CG009", "breaker with no attempt timeout inside it: a hung call holds a half-open probe slot"},
		{"CG010", "failure-rate window shorter than 2 × the attempt timeout inside it"},
		{"CG011", "too many half-open probes: each failed round loads a downstream that is still down"},
		{"CG012", "open timeout shorter than the downstream's recovery time: open/half-open jitter"},
	}
}

type linter struct {
	steps []step
	o     Options
	out   []Finding
}

func (l *linter) warn(code, format string, args ...any) {
	l.out = append(l.out, Finding{Code: code, Severity: Warning, Message: fmt.Sprintf(format, args...)})
}

func lint(steps []step, o Options) []Finding {
	if o.MaxDetection == 0 {
		o.MaxDetection = 10 * time.Second
	}
	l := &linter{steps: steps, o: o}
	for i, s := range steps {
		switch s.kind {
		case kindBreaker:
			l.breaker(i, s.b)
		case kindRetry:
			l.retry(i)
		case kindTimeout:
			l.timeout(i)
		case kindFallback:
			l.fallback(i)
		}
	}
	return l.out
}

// innerTimeout returns the soonest timeout among steps after i (the one an
// attempt actually gets), using an adaptive timeout's maximum.
func (l *linter) innerTimeout(i int) (time.Duration, bool) {
	var d time.Duration
	found := false
	for _, s := range l.steps[i+1:] {
		if s.kind != kindTimeout {
			continue
		}
		t := s.t.Timeout()
		if s.t.IsAdaptive() {
			_, t = s.t.AdaptiveBounds()
		}
		if !found || t < d {
			d, found = t, true
		}
	}
	return d, found
}

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
		a := o.r.Attempts()
		if j < i && o.r.RetriesWhenOpen() {
			sum, parts := sumWaits(o.r.Waits())
			l.warn("CG001", "%v retries breaker.ErrOpen (RetryWhenOpen) outside %s: while the breaker is open each request still waits ≈ %v of backoff (%s) before it fails, instead of failing at once (docs/conflicts.md, case 3). Fix: drop RetryWhenOpen, and answer ErrOpen with a fallback if a degraded answer is wanted.",
				o.r, name, sum, parts)
		}
		if j > i && a > 1 {
			var consequence string
			switch {
			case !known:
				consequence = fmt.Sprintf("it needs %d× the downstream calls to trip", a)
			case s.ConsecutiveFailures > 0:
				n := s.ConsecutiveFailures
				consequence = fmt.Sprintf("with %d consecutive failures to trip it opens after %d downstream calls instead of %d", n, n*a, n)
			default:
				consequence = fmt.Sprintf("its rates need %d downstream calls instead of %d (MinCalls) before they can trip", s.MinCalls*a, s.MinCalls)
			}
			l.warn("CG002", "%v is inside %s: the breaker sees one outcome per request, 1 failure per %d downstream calls; %s, and a downstream that is down gets %d× the load before the breaker reacts (docs/conflicts.md, case 1: 15 calls instead of 5). Fix: put the retry outside the breaker: chain.New(retry, breaker, …).",
				o.r, name, a, consequence, a)
		}
	}

	// CG004, CG009, CG010: the attempt timeout inside the breaker.
	t, ok := l.innerTimeout(i)
	switch {
	case !ok:
		l.warn("CG009", "%s has no attempt timeout inside it: a call that hangs holds its half-open probe slot until it returns, and a hung downstream never counts as failing. Fix: add timeout.New(d) between the breaker and the call: chain.New(…, breaker, timeout).", name)
	default:
		if n := s.ConsecutiveFailures; n > 0 && mulSat(n, t) > l.o.MaxDetection {
			l.warn("CG004", "%s trips after %d consecutive failures and the attempt timeout inside it is %v: a hung downstream is detected only after %d × %v = %v at 1 caller, each call holding its caller %v meanwhile (docs/conflicts.md, case 2: 15 s at 3 s × 5). Fix: a shorter attempt timeout (still above the healthy tail latency) or fewer failures to trip, for detection within %v.",
				name, n, t, n, t, mulSat(n, t), t, l.o.MaxDetection)
		}
		if s.FailureRate > 0 && s.Window > 0 && s.Window < mulSat(2, t) {
			l.warn("CG010", "%s rates failures over a %v window, less than 2 × the %v attempt timeout inside it: a hung call is counted only when its timeout fires, so the window sees few outcomes and the rate swings on each. Fix: a window of at least %v (10 × the timeout is typical).",
				name, s.Window, t, mulSat(2, t))
		}
	}

	if !known || s.SkipHalfOpen {
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
		l.warn("CG011", "%s admits %d half-open probes: each failed round sends %d calls to a downstream that is still down (docs/breaker.md: 2 / 6 / 18 failed probes for 1 / 3 / 10). Fix: 1 to 5 probes; to close reliably on a flaky downstream use HalfOpenSuccesses < HalfOpenProbes rather than more probes.",
			name, n, n)
	}
	// CG012: breaker jitter.
	if r := l.o.DownstreamRecovery; r > 0 && s.OpenTimeout < r && s.MaxOpenTimeout < r {
		rounds := staysUntil(r, s.OpenTimeout, s.MaxOpenTimeout)
		l.warn("CG012", "%s stays open %v but the downstream takes %v to recover: it will go open → half-open → open about %d times per outage, each round sending %d probes to a downstream still recovering (breaker jitter). Fix: OpenTimeout ≥ %v, or MaxOpenTimeout ≥ %v so the stay grows.",
			name, s.OpenTimeout, r, rounds-1, n, r, r)
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

func (l *linter) retry(i int) {
	r := l.steps[i].r
	// CG006: another retry inside this one.
	for _, o := range l.steps[i+1:] {
		if o.kind == kindRetry {
			l.warn("CG006", "%v wraps %v: up to %d × %d = %d downstream calls per request, and the outer waits stack on the inner ones. Fix: keep a single retry, outside the breaker.",
				r, o.r, r.Attempts(), o.r.Attempts(), r.Attempts()*o.r.Attempts())
		}
	}
}

func (l *linter) timeout(i int) {
	t := l.steps[i].t
	// CG003: below the declared healthy latency.
	d := t.Timeout()
	if t.IsAdaptive() {
		_, d = t.AdaptiveBounds()
	}
	for _, q := range t.Declared() {
		if q.Latency >= d && 1-q.Q >= 0.01 {
			l.warn("CG003", "%v is at or below the downstream's declared p%s latency of %v: ≥ %s%% of calls to a healthy downstream will time out and count as failures, and a breaker will open on a downstream that is fine (docs/conflicts.md, case 4: 16 opens in 20 s at 100 ms). Fix: a timeout above the healthy tail%s, or timeout.Adaptive.",
				t, percent(q.Q), q.Latency, percent(1-q.Q), tailHint(t.Declared()))
			break
		}
	}
	// CG005: an overall timeout around a retry.
	for j := i + 1; j < len(l.steps); j++ {
		if l.steps[j].kind != kindRetry {
			continue
		}
		r := l.steps[j].r
		waits, _ := sumWaits(r.Waits())
		at, ok := l.innerTimeout(j)
		need := waits
		how := fmt.Sprintf("%v of waits", waits)
		if ok {
			need = addSat(need, mulSat(r.Attempts(), at))
			how = fmt.Sprintf("%d attempts × %v + %v of waits", r.Attempts(), at, waits)
		}
		if d < need {
			l.warn("CG005", "%v wraps %v, whose attempts can take %s = %v: the last attempts are cut short or never made. Fix: an overall timeout of at least %v, or fewer attempts or shorter waits.",
				t, r, how, need, need)
		}
		break
	}
}

func percent(f float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", 100*f), "0"), ".")
}

func tailHint(qs []timeout.Quantile) string {
	if len(qs) == 0 {
		return ""
	}
	last := qs[len(qs)-1]
	return fmt.Sprintf(" (declared p%s: %v)", percent(last.Q), last.Latency)
}

func (l *linter) fallback(i int) {
	f := l.steps[i].f
	for j := 0; j < i; j++ {
		o := l.steps[j]
		switch {
		case o.kind == kindBreaker:
			l.warn("CG008", "%v is inside %s: the failures it answers look like successes to the breaker, which then never opens and never protects the downstream. Fix: put the fallback outermost: chain.New(fallback, retry, breaker, …).", f, o.b)
		case o.kind == kindRetry && !f.OnlyOpen():
			l.warn("CG008", "%v is inside %v: the failures it answers look like successes, so the retry never retries them. Fix: put the fallback outermost: chain.New(fallback, retry, breaker, …).", f, o.r)
		case o.kind == kindTimeout && !f.OnlyOpen():
			l.warn("CG008", "%v is inside %v: it runs within that timeout, so when the %v are up it cannot answer: the caller gets the timeout's error, not the fallback's answer. Fix: put the fallback outermost: chain.New(fallback, timeout, …).", f, o.t, o.t.Timeout())
		}
	}
}

// addSat and mulSat are + and × on durations that stop at the largest one
// instead of wrapping around: a lint over huge settings must not go silent.
func addSat(a, b time.Duration) time.Duration {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func mulSat(n int, d time.Duration) time.Duration {
	if n > 0 && d > 0 && d > time.Duration(math.MaxInt64/int64(n)) {
		return math.MaxInt64
	}
	return time.Duration(n) * d
}

// sumWaits adds a retry's nominal waits, and lists them, the middle elided
// past a dozen.
func sumWaits(waits []time.Duration) (time.Duration, string) {
	var sum time.Duration
	parts := make([]string, 0, min(len(waits), 13))
	for k, w := range waits {
		sum = addSat(sum, w)
		switch {
		case len(waits) <= 12 || k < 6 || k >= len(waits)-6:
			parts = append(parts, w.String())
		case k == 6:
			parts = append(parts, fmt.Sprintf("… %d more …", len(waits)-12))
		}
	}
	return sum, strings.Join(parts, " + ")
}

// staysUntil counts the open stays a breaker goes through before a
// downstream that takes r to recover is back: each stay doubles from open
// up to maxOpen (no growth if maxOpen ≤ open).
func staysUntil(r, open, maxOpen time.Duration) int {
	n, elapsed, stay := 0, time.Duration(0), open
	for elapsed < r && n < 1_000_000 {
		elapsed = addSat(elapsed, stay)
		n++
		if maxOpen > stay {
			stay = min(mulSat(2, stay), maxOpen)
		}
	}
	return n
}
