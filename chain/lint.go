package chain

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/timeout"
)

// Rule describes one lint rule.
type Rule struct {
	Code    string
	Summary string
}

// Rules returns the lint rules, by code. Codes are stable: a code is never
// reused for another rule, and a retired one stays listed (so that an
// Options.Ignore naming it still builds) with a summary saying so.
func Rules() []Rule {
	return []Rule{
		{"CG001", "retry outside a breaker keeps retrying when it is open (RetryWhenOpen): backoff waits for nothing"},
		{"CG002", "retry inside a breaker: the breaker sees one failure per request, not per call, and opens late"},
		{"CG003", "timeout at or below a declared healthy latency quantile up to p99: ≥ 1 % of healthy calls time out"},
		{"CG004", "attempt timeout × failures to trip too slow, or cut by a shorter deadline outside it: a hung downstream is detected late, or never"},
		{"CG005", "overall timeout too short for the attempts and waits of the retry it wraps"},
		{"CG006", "nested retries multiply attempts"},
		{"CG007", "half-open closes only if (almost) every probe succeeds: unlikely on a flaky downstream (q^N)"},
		{"CG008", "fallback inside a retry or breaker hides failures from them; inside a timeout it cannot answer it"},
		{"CG009", "breaker with no attempt timeout inside it: a hung call holds a half-open probe slot"},
		{"CG010", "failure-rate window shorter than 2 × the attempt timeout inside it"},
		{"CG011", "too many half-open probes: each failed round loads a downstream that is still down"},
		{"CG012", "open timeout shorter than the downstream's recovery time: open/half-open (or open/closed) jitter"},
		{"CG013", "info: a retry budget sends fewer failing attempts to the breaker inside, which trips later"},
		{"CG014", "adaptive attempt timeout that can grow past an outer timeout: attempts end on the outer deadline"},
		{"CG015", "info: a fixed attempt timeout with no declared tail latency: nothing checks it against the healthy tail"},
		{"CG016", "hedge outside a retry: attempts multiply (hedges × attempts) and a hedge starts the retries over"},
		{"CG017", "hedge inside a breaker: the breaker sees one outcome for several attempts; a half-open probe becomes several calls"},
		{"CG018", "info: a chain's Do hedges every call; hedge only idempotent calls (the adapters do)"},
		{"CG019", "fixed hedge delay below the declared median latency: the hedge budget goes to ordinary calls"},
		{"CG020", "retired: a limiter or bulkhead inside a retry is its canonical place (docs/ordering.md says what a rejection does to the retries); never reported"},
		{"CG021", "throttle inside a breaker: the breaker sees only what the throttle lets through and may stay half-open"},
		{"CG022", "limiter or bulkhead queue wait at least the attempt timeout: a standing queue that spends the callers' time"},
		{"CG023", "hedging with a retry that has no budget: a slow, failing downstream gets hedges × attempts per request"},
		{"CG024", "limiter or bulkhead outside a retry: slots held through backoff waits; an adaptive limit measures whole requests"},
		{"CG025", "error: the same breaker, throttle, limiter, bulkhead, hedge, budgeted retry or adaptive timeout twice in one chain: it counts each call twice"},
		{"CG026", "info: two breakers in one chain: the inner sees every attempt the outer admits, and its rejections count as failures to the outer"},
		{"CG027", "info: a breaker's failure rate inside a retry rates attempts: 50 % of attempts is an eighth of the requests with 3 attempts"},
	}
}

type linter struct {
	steps []step
	o     Options
	out   []Finding
}

func (l *linter) warn(code, format string, args ...any) {
	l.out = append(l.out, Finding{Code: code, Severity: SeverityWarning, Message: fmt.Sprintf(format, args...)})
}

func (l *linter) info(code, format string, args ...any) {
	l.out = append(l.out, Finding{Code: code, Severity: SeverityInfo, Message: fmt.Sprintf(format, args...)})
}

func lint(steps []step, o Options) []Finding {
	if o.MaxDetection == 0 {
		o.MaxDetection = 10 * time.Second
	}
	l := &linter{steps: steps, o: o}
	l.twice()
	for i, s := range steps {
		switch s.kind {
		case kindBreaker:
			l.breaker(i, s.bp())
		case kindRetry:
			l.retry(i)
		case kindTimeout:
			l.timeout(i)
		case kindFallback:
			l.fallback(i)
		case kindHedge:
			l.hedge(i)
		case kindThrottle:
			l.throttle(i)
		case kindLimit:
			st := s.p.(*limit.Limiter).Settings()
			l.limit(i, st.MaxQueue, st.MaxWait)
		case kindBulkhead:
			st := s.p.(*limit.Bulkhead).Settings()
			l.limit(i, st.MaxQueue, st.MaxWait)
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
		t := s.tx.Longest()
		if !found || t < d {
			d, found = t, true
		}
	}
	return d, found
}

func (l *linter) retry(i int) {
	r := l.steps[i].rp()
	// CG006: another retry inside this one.
	for _, o := range l.steps[i+1:] {
		if o.kind == kindRetry {
			l.warn("CG006", "%v wraps %v: up to %d × %d = %d downstream calls per request, and the outer waits stack on the inner ones. Fix: keep a single retry, outside the breaker.",
				r, o.rp(), r.Attempts(), o.rp().Attempts(), r.Attempts()*o.rp().Attempts())
		}
	}
}

func (l *linter) timeout(i int) {
	t, tx := l.steps[i].tp(), l.steps[i].tx
	// CG015: an attempt timeout tied to nothing.
	if !tx.Adaptive && len(tx.Declared) == 0 && l.attemptTimeout(i) {
		l.info("CG015", "%v bounds each attempt, but the downstream's healthy latency is not declared: the lint cannot check that healthy calls finish well within %v (CG003), and an attempt that a caller's deadline cuts counts as a failure once it has run %v, half the timeout, a guess. Fix: declare the tail, e.g. timeout.New(%v, timeout.Latency(0.99, p99)), or let it follow the observed one: timeout.Adaptive(timeout.AdaptiveOptions{Quantile: 0.99, …}).",
			t, tx.D, tx.D/2, tx.D)
	}
	// CG003: below the declared healthy latency.
	d := tx.Longest()
	for _, q := range tx.Declared {
		if q.Latency >= d && 1-q.Q >= 0.01 {
			l.warn("CG003", "%v is at or below the downstream's declared p%s latency of %v: ≥ %s%% of calls to a healthy downstream will time out and count as failures, and a breaker will open on a downstream that is fine (docs/conflicts.md, case 4: 16 opens in 20 s at 100 ms). Fix: a timeout above the healthy tail%s, or timeout.Adaptive.",
				t, percent(q.Q), q.Latency, percent(1-q.Q), tailHint(tx.Declared))
			break
		}
	}
	// CG005: an overall timeout around a retry.
	for j := i + 1; j < len(l.steps); j++ {
		if l.steps[j].kind == kindRetry {
			l.overallAround(t, d, l.steps[j], j)
			break
		}
	}
	// CG014: an adaptive timeout that can grow past an outer one.
	if tx.Adaptive {
		for k := i - 1; k >= 0; k-- {
			o := l.steps[k]
			if o.kind != kindTimeout || o.tx.Adaptive || o.tp().Timeout() > d {
				continue
			}
			l.warn("CG014", "%v can grow up to %v (AdaptiveOptions.Max), not below the %v of the %v around it: once it has grown that far, the outer deadline ends every attempt, after the whole %v, and a retry between them gets no further attempt. Fix: AdaptiveOptions.Max below %v.",
				t, d, o.tp().Timeout(), o.tp(), o.tp().Timeout(), o.tp().Timeout())
			break
		}
	}
}

// overallAround is CG005: the timeout t (of d) around retry r, step j. It
// plays the retry's attempts and nominal waits against t's deadline as the
// retry does (it makes no wait that would end at or past the deadline):
// once with attempts that fail at once, and once with attempts that each
// run to the attempt timeout inside the retry, if there is one. It warns
// when an attempt would never be made, or would be cut below what a
// healthy answer may take (the attempt timeout's patience: its declared
// tail latency, its adaptive estimate, or half of it).
func (l *linter) overallAround(t *timeout.Policy, d time.Duration, rs step, j int) {
	r := rs.rp()
	waits := rs.rx.Waits()
	total, _ := sumWaits(waits)
	// Failing at once: the waits alone.
	var at time.Duration
	for k, w := range waits {
		if addSat(at, w) >= d {
			l.warn("CG005", "%v wraps %v: even when every attempt fails at once, attempt %d is never made: the waits before it (%v) would end at or past the %v deadline. Fix: an overall timeout above %v, or fewer attempts or shorter waits.",
				t, r, k+2, addSat(at, w), d, total)
			return
		}
		at = addSat(at, w)
	}
	inner, ok := l.innerTimeoutPolicy(j)
	if !ok {
		return
	}
	per := bridge.TimeoutOf(inner).Longest()
	patience := bridge.TimeoutPatience(inner)
	need := addSat(mulSat(r.Attempts(), per), total)
	var now time.Duration
	for k := 1; k <= r.Attempts(); k++ {
		if k > 1 {
			w := waits[k-2]
			if addSat(now, w) >= d {
				l.warn("CG005", "%v wraps %v: when every attempt times out (%d × %v, and %v of waits), attempt %d is never made: its wait would end at %v, at or past the %v deadline. Fix: an overall timeout of at least %v, or fewer attempts or shorter waits.",
					t, r, r.Attempts(), per, total, k, addSat(now, w), d, need)
				return
			}
			now = addSat(now, w)
		}
		got := min(per, d-now)
		if got < patience {
			l.warn("CG005", "%v wraps %v: when every attempt times out (%d × %v, and %v of waits), attempt %d starts at %v and gets only %v of its %v, less than the %v a healthy answer may take. Fix: an overall timeout of at least %v, or fewer attempts or shorter waits.",
				t, r, r.Attempts(), per, total, k, now, got, per, patience, need)
			return
		}
		now = addSat(now, got)
	}
}

// innerTimeoutPolicy returns the timeout among steps after i that an
// attempt gets (the soonest, by an adaptive timeout's maximum).
func (l *linter) innerTimeoutPolicy(i int) (*timeout.Policy, bool) {
	var best *timeout.Policy
	var d time.Duration
	for _, s := range l.steps[i+1:] {
		if s.kind != kindTimeout {
			continue
		}
		t := s.tx.Longest()
		if best == nil || t < d {
			best, d = s.tp(), t
		}
	}
	return best, best != nil
}

func percent(f float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", 100*f), "0"), ".")
}

func tailHint(qs []bridge.Quantile) string {
	if len(qs) == 0 {
		return ""
	}
	last := qs[len(qs)-1]
	return fmt.Sprintf(" (declared p%s: %v)", percent(last.Q), last.Latency)
}

func (l *linter) fallback(i int) {
	f, onlyOpen := l.steps[i].fp(), l.steps[i].fx.OnlyOpen
	for j := 0; j < i; j++ {
		o := l.steps[j]
		switch {
		case o.kind == kindBreaker && !onlyOpen:
			l.warn("CG008", "%v is inside %s: the failures it answers look like successes to the breaker, which then never opens and never protects the downstream. Fix: put the fallback outermost: chain.New(fallback, retry, breaker, …).", f, o.bp())
		case o.kind == kindBreaker && !l.breakerAfter(i):
			l.warn("CG008", "%v is inside %s, and no breaker is inside it: nothing it wraps returns breaker.ErrOpen, so it never answers, and the breaker's ErrOpen reaches the caller. Fix: put the fallback outermost: chain.New(fallback, retry, breaker, …).", f, o.bp())
		case o.kind == kindRetry && !onlyOpen:
			l.warn("CG008", "%v is inside %v: the failures it answers look like successes, so the retry never retries them. Fix: put the fallback outermost: chain.New(fallback, retry, breaker, …).", f, o.rp())
		case o.kind == kindTimeout && !onlyOpen:
			l.warn("CG008", "%v is inside %v: it runs within that timeout, so when the %v are up it cannot answer: the caller gets the timeout's error, not the fallback's answer. Fix: put the fallback outermost: chain.New(fallback, timeout, …).", f, o.tp(), o.tp().Timeout())
		}
	}
}

// attemptTimeout reports that step i, a timeout, bounds each attempt: a
// retry or a breaker is outside it.
func (l *linter) attemptTimeout(i int) bool {
	for _, s := range l.steps[:i] {
		if s.kind == kindRetry || s.kind == kindBreaker {
			return true
		}
	}
	return false
}

// breakerAfter reports a breaker among the steps after i.
func (l *linter) breakerAfter(i int) bool {
	for _, s := range l.steps[i+1:] {
		if s.kind == kindBreaker {
			return true
		}
	}
	return false
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
