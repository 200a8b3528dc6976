package scenario

import (
	"slices"
	"time"
)

// Result is what a run measured. Times are from the fault's start (F);
// the fault lasts L; the run is measured until F + H (the Horizon).
type Result struct {
	Requests  int // requests that started in [F, F+H)
	Successes int // requests that succeeded, ending in [F, F+H): the headline
	// Goodput is successes per second, ending during the fault ([F, F+L))
	// and after it ([F+L, F+H)); Baseline is the same in the healthy
	// second half of the warm-up.
	GoodputFault, GoodputAfter, Baseline float64
	// Amplification is the downstream calls per request, for the requests
	// that started during the fault.
	Amplification float64
	// P50 and P99 are the callers' latencies, successes and failures alike,
	// of the requests that started in [F, F+H).
	P50, P99 time.Duration
	P999     time.Duration
	// Detect is when the first request failed without reaching the
	// downstream (a breaker rejected it), from F; -1 if none did.
	Detect time.Duration
	// Refused is the requests started in [F, F+H) that failed without
	// reaching the downstream: refused by the stack (a breaker, a limit, a
	// throttle).
	Refused int
	// Recover is when, from F, the share of requests that succeed is back
	// to 95 % of the warm-up's, for three seconds in a row, once the
	// downstream has healed (Scenario.Healed); -1 if not within the
	// horizon. Recover − Healed is what the stack adds to the downstream's
	// own recovery.
	Recover time.Duration
	// Wasted is the worker time spent on requests whose caller had given
	// up, over the whole run.
	Wasted time.Duration
	// QueueMean and QueueMax are the queue lengths arrivals found in
	// [F, F+H).
	QueueMean float64
	QueueMax  int
	// Metastable: in the last 10 s of the horizon, at least 20 s after the
	// downstream healed, fewer than half the requests succeed that did in
	// the warm-up.
	Metastable bool
	// Timeline is the successes in each second (Scenario.Unit) of the run,
	// from its start.
	Timeline []int
	// Began is when the run's clock started: the origin of its times.
	Began time.Time
	// Marks is each request's outcome at its end, in time order, with
	// Cell.Record.
	Marks []Mark
	// Server is what the downstream did over the whole run.
	Server Stats
}

// measure turns a run's requests into its Result.
func measure(sc Scenario, reqs []request, rec Record) Result {
	F, L, H := sc.Start, sc.Length, sc.Horizon
	end := F + H
	unit := sc.unit()
	secs := int((end + unit - 1) / unit)
	started := make([]int, secs)
	succeeded := make([]int, secs) // by start, for rates
	res := Result{Detect: -1, Recover: -1, Timeline: make([]int, secs), Server: rec.Stats}
	var lat []time.Duration
	var faultReqs, faultCalls int
	warmFrom := F / 2
	var warmReqs, warmOK, warmGood int
	for _, r := range reqs {
		if sec := int(r.start / unit); sec < secs {
			started[sec]++
			if r.ok {
				succeeded[sec]++
			}
		}
		if r.ok {
			if sec := int(r.end / unit); sec < secs {
				res.Timeline[sec]++
			}
		}
		switch {
		case r.start >= warmFrom && r.start < F:
			warmReqs++
			if r.ok {
				warmOK++
			}
		case r.start >= F && r.start < end:
			res.Requests++
			lat = append(lat, r.end-r.start)
			if r.start < F+L {
				faultReqs++
				faultCalls += int(r.calls)
			}
			if !r.ok && r.calls == 0 {
				res.Refused++
				if res.Detect < 0 || r.start-F < res.Detect {
					res.Detect = r.start - F
				}
			}
		}
		if r.ok && r.end >= warmFrom && r.end < F {
			warmGood++
		}
		if r.ok && r.end >= F && r.end < end {
			res.Successes++
			if r.end < F+L {
				res.GoodputFault++
			} else {
				res.GoodputAfter++
			}
		}
	}
	res.GoodputFault /= L.Seconds()
	res.GoodputAfter /= (H - L).Seconds()
	res.Baseline = float64(warmGood) / (F - warmFrom).Seconds()
	if faultReqs > 0 {
		res.Amplification = float64(faultCalls) / float64(faultReqs)
	}
	slices.Sort(lat)
	res.P50, res.P99, res.P999 = quantileOf(lat, 0.5), quantileOf(lat, 0.99), quantileOf(lat, 0.999)

	base := 1.0
	if warmReqs > 0 {
		base = float64(warmOK) / float64(warmReqs)
	}
	ratio := func(sec int) (float64, bool) {
		if sec >= secs || started[sec] == 0 {
			return 0, false
		}
		return float64(succeeded[sec]) / float64(started[sec]), true
	}
	after := int((F + sc.Healed) / unit)
	for sec := after; sec+2 < secs; sec++ {
		good := true
		for k := sec; k < sec+3; k++ {
			if r, ok := ratio(k); !ok || r < 0.95*base {
				good = false
				break
			}
		}
		if good {
			res.Recover = max(time.Duration(sec)*unit-F, sc.Healed)
			break
		}
	}
	if tail := end - 10*unit; tail >= F+sc.Healed+20*unit {
		var n, ok int
		for sec := int(tail / unit); sec < secs; sec++ {
			n, ok = n+started[sec], ok+succeeded[sec]
		}
		res.Metastable = n > 0 && float64(ok)/float64(n) < 0.5*base
	}
	res.Wasted = res.Server.Wasted
	res.QueueMean, res.QueueMax = rec.queueIn(F, end)
	return res
}

// quantileOf is the nearest-rank quantile of sorted values (0 if none).
func quantileOf(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return quantile(sorted, q)
}
