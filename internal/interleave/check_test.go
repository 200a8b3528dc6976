package interleave

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// violation is one invariant a case broke.
type violation struct {
	inv  int // the invariant's number (see doc.go)
	what string
}

func (v violation) String() string { return fmt.Sprintf("invariant %d: %s", v.inv, v.what) }

type checker struct {
	cs  *kase
	out []violation
	// slack is the margin of a cutoff on real sockets (0 in a bubble).
	slack time.Duration
}

func (c *checker) fail(inv int, format string, args ...any) {
	c.out = append(c.out, violation{inv, fmt.Sprintf(format, args...)})
}

// cutoff is when call i's caller gives up.
func (c *checker) cutoff(i int) time.Duration {
	cs, r := c.cs, c.cs.results[i]
	cp := cs.calls[i]
	t := r.start + cs.watchdog
	if cp.deadline > 0 {
		t = min(t, r.start+cp.deadline)
	}
	if cp.cancelAt > 0 {
		t = min(t, r.start+cp.cancelAt)
	}
	return t - c.slack
}

func (c *checker) arrivalsOf(i int) []*arrival {
	var as []*arrival
	for _, a := range c.cs.arrivals {
		if a.call == i {
			as = append(as, a)
		}
	}
	return as
}

// alone reports that no other attempt of a's call ended at the instant a
// did (at one instant, which of two ends was seen first is a toss).
func (c *checker) alone(a *arrival) bool {
	for _, o := range c.arrivalsOf(a.call) {
		if o != a && o.end == a.end && (o.answered || o.endedByCtx) {
			return false
		}
	}
	return true
}

// cleanOK: a success the downstream gave while the attempt's context and
// its caller were live.
func (c *checker) cleanOK(a *arrival) bool {
	return a.answered && a.live && a.ans.kind == aOK && a.end < c.cutoff(a.call)
}

// isFailure: an answer every policy counts as the downstream's failure.
func (c *checker) isFailure(k akind) bool {
	return k == a5xx || k == a429 || (k == aBad && c.cs.mode == modeDo)
}

func (c *checker) cleanFailure(a *arrival) bool {
	return a.answered && a.live && c.isFailure(a.ans.kind) && a.end < c.cutoff(a.call) && c.alone(a)
}

// cleanTimeout: a hung attempt that the timeout of dIn inside the policy
// looked at ended, with no other deadline at that instant.
func (c *checker) cleanTimeout(a *arrival, dIn time.Duration, outer []time.Duration) bool {
	if dIn <= 0 || !a.endedByCtx || a.ans.deaf || a.end != a.start+dIn || a.end >= c.cutoff(a.call) || !c.alone(a) {
		return false
	}
	r := c.cs.results[a.call]
	for _, d := range outer {
		if r.start+d == a.end {
			return false
		}
	}
	return true
}

// check runs every invariant over a finished case.
func (c *checker) check(e *env) {
	cs := c.cs
	cs.mu.Lock() // a downstream handler may still be recording (loopback)
	defer cs.mu.Unlock()
	panics := len(cs.panics) > 0
	hasFallback := cs.has(func(p *pol) bool { return p.kind == kFallback })
	for i, r := range cs.results {
		if r == nil || !r.done {
			c.fail(5, "call %d never returned", i)
			continue
		}
		as := c.arrivalsOf(i)
		// 1: a success reached the caller, intact, from one attempt
		var clean *arrival
		for _, a := range as {
			if c.cleanOK(a) {
				clean = a
				break
			}
		}
		success := r.panicked == nil && r.err == nil && (cs.mode != modeHTTP || r.status == 200)
		// an adapter's policies count a caller error (400, InvalidArgument)
		// as an answer: a hedge or a retry may settle on it first
		answer := false
		for _, a := range as {
			answer = answer || (cs.mode != modeDo && a.answered && a.ans.kind == aBad && r.panicked == nil &&
				((cs.mode == modeHTTP && r.err == nil && r.status == 400 && r.body == tag(i, a.n)) ||
					(cs.mode == modeGRPC && status.Code(r.err) == codes.InvalidArgument)))
		}
		if clean != nil && r.panicked == nil && !success && !answer {
			c.fail(1, "call %d: attempt %d succeeded at %v (caller gives up at %v), the caller got err=%v status=%d body=%q", i, clean.n, clean.end, c.cutoff(i), r.err, r.status, r.body)
		}
		if success && cs.mode != modeDo {
			from := r.body == fallbackBody && hasFallback
			for _, a := range as {
				if a.answered && a.ans.kind == aOK && r.body == tag(i, a.n) {
					from = true
				}
			}
			if !from {
				c.fail(1, "call %d: a success whose body %q comes from no attempt that succeeded", i, r.body)
			} else if r.body != fallbackBody && (r.header != r.body || r.trailer != r.body) {
				c.fail(1, "call %d: body %q, header %q, trailer %q: not all from one attempt", i, r.body, r.header, r.trailer)
			} else if cs.mode == modeGRPC && r.body != fallbackBody && !r.peer {
				c.fail(1, "call %d: a success without its peer", i)
			}
		}
		// 2: not idempotent, sent at most once
		if cs.mode != modeDo && !cs.idempotent && len(as) > 1 {
			c.fail(2, "call %d is not idempotent and reached the downstream %d times", i, len(as))
		}
		// 5: a call ends with its attempts or its caller
		// (every attempt that a cancel does not end is waited for, whatever
		// its place among the call's attempts)
		last := time.Duration(0)
		for _, a := range as {
			if !a.endedByCtx {
				last = max(last, a.end)
			}
		}
		for _, a := range as {
			if a.ans.kind == aPanic && r.panicked != nil && r.end > max(last, a.end)+c.slack*4 {
				c.fail(5, "call %d: attempt %d panicked at %v, the panic reached the caller at %v (the other attempts were not canceled)", i, a.n, a.end, r.end)
			}
		}
		hung := false
		for _, a := range as {
			hung = hung || (a.endedByCtx && a.end >= r.start+cs.watchdog-c.slack)
		}
		if !hung && r.end >= r.start+cs.watchdog && !c.queuedBehindHang(i) {
			c.fail(5, "call %d ran until its watchdog (%v), though no attempt of it hung that long", i, cs.watchdog)
		}
	}
	c.permits(panics)
	if !panics {
		c.counts()
	}
	c.telemetry(e)
	if cs.mode == modeHTTP && !cs.real {
		if b, cl := cs.bodies.Load(), cs.closed.Load(); b != cl {
			c.fail(5, "%d response bodies made by the base, %d closed", b, cl)
		}
	}
}

// permits: invariant 3, for every limit, bulkhead, breaker and hedge.
func (c *checker) permits(panics bool) {
	cs := c.cs
	cs.walk(func(p *pol) {
		switch {
		case p.lim != nil && (p.lim.InFlight() != 0 || p.lim.Queued() != 0):
			c.fail(3, "%s: %d in flight, %d queued after every call returned", p.desc, p.lim.InFlight(), p.lim.Queued())
		case p.bh != nil && (p.bh.InFlight() != 0 || p.bh.Queued() != 0):
			c.fail(3, "%s: %d in flight, %d queued after every call returned", p.desc, p.bh.InFlight(), p.bh.Queued())
		case p.br != nil:
			cn := p.br.Counts()
			if sum := cn.Successes + cn.Failures + cn.SlowUnanswered + cn.Neutral + cn.RejectedOpen + cn.RejectedProbes; sum != cn.Requests {
				c.fail(4, "%s: counts %+v do not add up to its requests", p.desc, cn)
			}
		case p.hg != nil:
			st := p.hg.Stats()
			if float64(st.Hedges) > float64(p.burst)+p.budget*float64(st.Calls)+1e-9 {
				c.fail(3, "%s: %d hedges for %d calls, above its budget (burst %d + %v per call)", p.desc, st.Hedges, st.Calls, p.burst, p.budget)
			}
		}
	})
	// the hedge's count against the attempts the downstream received
	var hg *pol
	n := 0
	cs.walk(func(p *pol) {
		if p.kind == kHedge {
			hg, n = p, n+1
		}
	})
	if n != 1 || cs.has(func(p *pol) bool { return p.kind == kRetry || p.kind == kOwn }) || (cs.mode != modeDo && !cs.idempotent) {
		return
	}
	j := -1
	for k, p := range cs.pols {
		if p == hg {
			j = k
		}
	}
	for _, p := range cs.pols[j+1:] {
		if p.kind != kTimeout {
			return
		}
	}
	beyond := 0
	for _, k := range cs.perCall {
		beyond += max(k-1, 0)
	}
	st := hg.hg.Stats()
	if (cs.mode == modeDo && int(st.Hedges) != beyond) || int(st.Hedges) < beyond {
		c.fail(3, "%s: Stats %+v, the downstream received %d attempts beyond the first of each call", hg.desc, st, beyond)
	}
	stats.hedgeCounted++
}

// counts: invariant 4, for a throttle, a limit or a breaker that sees
// attempts one by one (no retry or hedge inside it, only breakers and
// timeouts), and every deadline outside it an overall timeout.
func (c *checker) counts() {
	cs := c.cs
	for j, p := range cs.pols {
		if p.th == nil && p.br == nil && (p.lim == nil || !p.aimd) {
			continue
		}
		ok := true
		dIn := time.Duration(0)
		for _, q := range cs.pols[j+1:] {
			switch {
			case q.kind == kTimeout:
				if dIn == 0 || q.d < dIn {
					dIn = q.d
				}
			case q.kind == kBreaker && p.br == nil:
			default:
				ok = false
			}
		}
		var outer []time.Duration
		multiplied := false
		// outside p, the policies a user's own nests count in their place:
		// a timeout of a nested chain is a deadline outside p
		var outside []*pol
		var flat func([]*pol)
		flat = func(ps []*pol) {
			for _, q := range ps {
				outside = append(outside, q)
				flat(q.inner)
			}
		}
		flat(cs.pols[:j])
		hedged := false
		for _, q := range outside {
			multiplied = multiplied || q.multiplies() || q.kind == kLimit || q.kind == kBulkhead
			hedged = hedged || q.kind == kHedge
			if q.kind == kFallback && hedged {
				// A hedge's branch refused on its way to p (p open, a
				// limit full) that this fallback answers wins the hedge
				// at the instant it began: an attempt of p answered at
				// that instant is canceled first (neutral) or counted,
				// a toss the downstream cannot tell.
				ok = false
			}
			if q.kind == kTimeout {
				if multiplied {
					ok = false
				}
				outer = append(outer, q.d)
			}
		}
		if !ok {
			continue
		}
		fails, timeouts, succ, answered := 0, 0, 0, 0
		for _, a := range cs.arrivals {
			if a.call < 0 {
				continue
			}
			switch {
			case c.cleanFailure(a):
				fails++
			case c.cleanTimeout(a, dIn, outer):
				timeouts++
			case c.cleanOK(a) && c.alone(a) || (a.answered && a.live && a.ans.kind == aBad && cs.mode != modeDo && a.end < c.cutoff(a.call) && c.alone(a)):
				succ++
			}
			if a.answered && (a.ans.kind == aOK || (a.ans.kind == aBad && cs.mode != modeDo)) {
				answered++
			}
		}
		switch {
		case p.th != nil:
			req, acc := p.th.Counts()
			if req-acc < fails+timeouts {
				c.fail(4, "%s: %d requests, %d accepts, after %d failures and %d attempt timeouts the downstream saw", p.desc, req, acc, fails, timeouts)
			}
			stats.throttleCounted++
		case p.br != nil:
			cn := p.br.Counts()
			// over HTTP a failing answer counts when its body is done with: one
			// discarded after another attempt won is the caller's, neutral
			if (int(cn.Failures+cn.SlowUnanswered) < fails+timeouts && (cs.mode != modeHTTP || !multiplied)) || (cs.mode == modeDo && int(cn.Successes) < succ) {
				c.fail(4, "%s: counts %+v, after %d failures, %d attempt timeouts and %d successes the downstream saw", p.desc, cn, fails, timeouts, succ)
			}
			if adm := cn.Successes + cn.Failures + cn.SlowUnanswered; int(adm) > len(cs.arrivals) {
				c.fail(4, "%s: %d outcomes counted for %d attempts sent", p.desc, adm, len(cs.arrivals))
			}
			stats.breakerCounted++
		case p.lim != nil:
			bound := max(p.initial-timeouts, p.minLim) + answered
			if l := p.lim.Limit(); l > bound {
				c.fail(4, "%s: limit %d after %d attempt timeouts (drops) and at most %d successes: want at most %d", p.desc, l, timeouts, answered, bound)
			}
			if timeouts > 0 {
				stats.limitCounted++
			}
		}
	}
}

// probes: invariant 3 for breakers, once their stays are over: each admits
// a probe (none is held by a call that has returned).
func (c *checker) probes() {
	longest := time.Duration(0)
	c.cs.walk(func(p *pol) {
		if p.br != nil {
			longest = max(longest, p.open)
		}
	})
	if longest == 0 {
		return
	}
	time.Sleep(2*longest + time.Second)
	c.cs.walk(func(p *pol) {
		if p.br == nil {
			return
		}
		permit, err := p.br.Allow(context.Background())
		if err != nil {
			c.fail(3, "%s: %v once its stay was over (state %v, %+v): a probe slot was kept", p.desc, err, p.br.State(), p.br.Counts())
			return
		}
		permit.DoneNeutral()
		stats.probesChecked++
	})
}

// telemetry: invariant 4, the adapters' call counts against the calls made.
func (c *checker) telemetry(e *env) {
	if e == nil || e.reader == nil {
		return
	}
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		c.fail(4, "collecting metrics: %v", err)
		return
	}
	total, ok := int64(0), int64(0)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "callguard.calls" {
				continue
			}
			sum, _ := m.Data.(metricdata.Sum[int64])
			for _, dp := range sum.DataPoints {
				total += dp.Value
				if v, _ := dp.Attributes.Value("callguard.outcome"); v.AsString() == "ok" {
					ok += dp.Value
				}
			}
		}
	}
	returned, succeeded := int64(0), int64(0)
	for _, r := range c.cs.results {
		if r != nil && r.panicked == nil {
			returned++
			if r.err == nil && (c.cs.mode != modeHTTP || r.status == 200) {
				succeeded++
			}
		}
	}
	if total != returned || (c.cs.mode == modeGRPC && ok != succeeded) || ok < succeeded {
		c.fail(4, "metrics count %d calls (%d ok), the callers got %d answers (%d successes)", total, ok, returned, succeeded)
	}
	stats.telemetryChecked++
}

// queuedBehindHang reports whether call i may have waited in a queue
// without MaxWait behind another call's attempt that hung until its
// watchdog: it waits as long, by design.
func (c *checker) queuedBehindHang(i int) bool {
	waits := false
	for _, p := range c.cs.pols {
		waits = waits || p.waits
	}
	if !waits {
		return false
	}
	for j, r := range c.cs.results {
		for _, a := range c.arrivalsOf(j) {
			if j != i && a.endedByCtx && a.end >= r.start+c.cs.watchdog-c.slack {
				return true
			}
		}
	}
	return false
}
