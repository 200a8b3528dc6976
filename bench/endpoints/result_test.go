package endpoints

import (
	"net"
	"slices"
	"time"
)

// phaseStats are an arm's calls that started in one phase.
type phaseStats struct {
	started, ok, open, rejected int
	p50, p99                    time.Duration // of the successful calls
}

func (p phaseStats) rate() float64 {
	if p.started == 0 {
		return 0
	}
	return float64(p.ok) / float64(p.started)
}

// none marks a time that did not happen (no ejection, no readmission).
const none = time.Duration(-1)

// armResult is one arm of a case.
type armResult struct {
	name    string
	ph      [phases]phaseStats
	overall phaseStats // every call of the case
	// to0 and toAll: the calls backend #0 and the whole fleet received
	// from the bad phase's first second to the heal; share is to0 against
	// #0's fair share (toAll / 10). bad0 is what #0 received in the whole
	// bad phase.
	to0, toAll, bad0 int
	share            float64
	// quiet: from the fault's start to the last call #0 received before
	// its first pause (quietFrom; server-side; none if none); back: from the
	// heal to the first call #0 received in a 250 ms window in which it
	// got at least half its fair share.
	quiet, back time.Duration
	// The per-endpoint policy's own account (its OnChange): from the
	// fault's start to #0's first ejection, from the heal to its
	// readmission (0: it was not ejected at the heal), the other
	// endpoints' ejections, the most endpoints ejected at once (by the
	// changes and by Statuses read every 10 ms), the openings its cap
	// kept from ejecting.
	policy               bool
	ejected, readmitted  time.Duration
	healthyEjected       [phases]int
	most, polled, capped int
	opens                [phases]int // the per-method / per-host breaker's
	firstOpen            time.Duration
	refusals             int // calls of the bad phase the client refused (breaker open, limit)
}

// caseResult is a case's measurements.
type caseResult struct {
	c       kase
	tm      timing
	run     *caseRun
	windows [phases]time.Duration
	arms    []armResult
}

func summarize(run *caseRun, tm timing) *caseResult {
	r := &caseResult{c: run.c, tm: tm, run: run}
	r.windows = [phases]time.Duration{run.bad, run.heal - run.bad, run.end - run.heal}
	for i, n := range run.names {
		a := armResult{name: n, policy: run.changes[i] != nil || isNew(n), firstOpen: none}
		var okDur [phases][]time.Duration
		var all []time.Duration
		for _, k := range run.calls[i] {
			p := &a.ph[k.phase]
			p.started++
			a.overall.started++
			switch k.how {
			case endOK:
				p.ok++
				a.overall.ok++
				okDur[k.phase] = append(okDur[k.phase], k.end-k.start)
				all = append(all, k.end-k.start)
			case endOpen:
				p.open++
				a.overall.open++
			case endRejected:
				p.rejected++
				a.overall.rejected++
			}
		}
		for ph := range a.ph {
			slices.Sort(okDur[ph])
			a.ph[ph].p50, a.ph[ph].p99 = quantile(okDur[ph], 0.5), quantile(okDur[ph], 0.99)
		}
		slices.Sort(all)
		a.overall.p50, a.overall.p99 = quantile(all, 0.5), quantile(all, 0.99)
		a.refusals = a.ph[phaseBad].open + a.ph[phaseBad].rejected

		arr := run.arrivals[i]
		b0 := arr[0]
		fleet := merge(arr)
		from := run.bad + time.Second
		a.to0, a.toAll = count(b0, from, run.heal), count(fleet, from, run.heal)
		a.bad0 = count(b0, run.bad, run.heal)
		if a.toAll > 0 {
			a.share = float64(a.to0) / (float64(a.toAll) / backends)
		}
		a.quiet = quietFrom(b0, fleet, run.bad, run.heal)
		a.back = backFrom(b0, fleet, run.heal, run.end)

		a.ejected, a.readmitted = none, none
		for _, ch := range run.changes[i] {
			at := ch.at.Sub(run.clock)
			switch {
			case ch.Capped:
				a.capped++
			case ch.Ejected && !is0(ch.Endpoint, run.addr0[i]):
				a.healthyEjected[run.phaseAt(at)]++
			case ch.Ejected && at >= run.bad && a.ejected == none:
				a.ejected = at - run.bad
			}
		}
		a.readmitted = readmission(run.changes[i], run.addr0[i], run.clock, run.heal)
		a.most, a.polled = run.most[i], run.polled[i]
		for _, at := range run.opens[i] {
			ph := run.phaseAt(at)
			a.opens[ph]++
			if ph == phaseBad && a.firstOpen == none {
				a.firstOpen = at - run.bad
			}
		}
		r.arms = append(r.arms, a)
	}
	return r
}

// phaseAt is the phase at time at of the case's clock.
func (run *caseRun) phaseAt(at time.Duration) int {
	switch {
	case at < run.bad:
		return phaseWarm
	case at < run.heal:
		return phaseBad
	}
	return phaseHealed
}

// healthyEjections is how many times the policy ejected a healthy
// backend, in every phase.
func (a *armResult) healthyEjections() int {
	return a.healthyEjected[phaseWarm] + a.healthyEjected[phaseBad] + a.healthyEjected[phaseHealed]
}

func (r *caseResult) arm(name string) *armResult {
	for i := range r.arms {
		if r.arms[i].name == name {
			return &r.arms[i]
		}
	}
	return nil
}

// readmission is, from the heal, #0's first readmission after it; 0 if
// #0 was not ejected at the heal; none if it was and stayed so.
func readmission(chs []change, addr0 string, clock time.Time, heal time.Duration) time.Duration {
	ejected := false
	for _, ch := range chs {
		if !is0(ch.Endpoint, addr0) || ch.Capped {
			continue
		}
		at := ch.at.Sub(clock)
		if at < heal {
			ejected = ch.Ejected
			continue
		}
		if !ejected {
			return 0
		}
		if !ch.Ejected {
			return at - heal
		}
	}
	if ejected {
		return none
	}
	return 0
}

// is0 reports whether a policy's endpoint is backend #0 at addr0
// (ip:port): grpcmw names an endpoint by its address, httpmw by its IP
// (the port is the URL's).
func is0(ep, addr0 string) bool {
	if ep == addr0 {
		return true
	}
	host, _, err := net.SplitHostPort(addr0)
	return err == nil && ep == host
}

// merge is the arrivals of every backend, sorted.
func merge(arr [][]time.Duration) []time.Duration {
	var out []time.Duration
	for _, a := range arr {
		out = append(out, a...)
	}
	slices.Sort(out)
	return out
}

// count is how many of sorted d fall in [from, to).
func count(d []time.Duration, from, to time.Duration) int {
	i, _ := slices.BinarySearch(d, from)
	j, _ := slices.BinarySearch(d, to)
	return max(j-i, 0)
}

// The server-side account of ejection and readmission.
const (
	gapMin     = 250 * time.Millisecond // out of the picks: no request to #0 for this long
	gapFleet   = 50                     // while the fleet received at least this many
	backWindow = 250 * time.Millisecond // readmitted: half its fair share in such a window
	backMin    = 40                     // of at least this many of the fleet's calls
)

// quietFrom is, from bad, the last request #0 received before its first
// pause of at least gapMin during which the fleet received at least
// gapFleet requests (out of the picks, as the servers saw it; a pause of
// the whole arm is not one); bad itself if the pause starts there; none
// if there was no such pause before heal.
func quietFrom(b0, fleet []time.Duration, bad, heal time.Duration) time.Duration {
	i, _ := slices.BinarySearch(b0, bad)
	t := bad
	for {
		next := heal
		if i < len(b0) && b0[i] < heal {
			next = b0[i]
		}
		if next-t >= gapMin && t+gapMin <= heal && count(fleet, t+1, t+gapMin) >= gapFleet {
			return t - bad
		}
		if next >= heal {
			return none
		}
		t = next
		i++
	}
}

// backFrom is, from heal, the first call #0 received that starts a
// backWindow in which #0 got at least half its fair share of at least
// backMin of the fleet's calls; none if none did before end.
func backFrom(b0, fleet []time.Duration, heal, end time.Duration) time.Duration {
	i, _ := slices.BinarySearch(b0, heal)
	for _, t := range b0[i:] {
		if t+backWindow > end {
			break
		}
		n0, n := count(b0, t, t+backWindow), count(fleet, t, t+backWindow)
		if n >= backMin && float64(n0) >= 0.5*float64(n)/backends {
			return t - heal
		}
	}
	return none
}
