package scenario

import "time"

// Ceiling is the most successes any stack could get in a cell, computed
// from the model rather than measured: at each moment of the measured
// horizon, the requests the load offers or the successes the downstream
// can give, whichever is fewer.
//
//   - The load offers its Rate (open loop), or Callers / Pace (closed
//     loop: each caller at most once a pace, which a caller reaches when
//     its requests end within a pace, as healthy ones do); while every
//     answer comes a Delay later, a closed loop's caller makes at most one
//     request a Delay. Answers that come later still (Late) and a stall of
//     the callers' host are not counted: no stack knows which answer will
//     be late, a hedge may dodge one, and a stall is the callers' own.
//   - The downstream gives nothing while it is down or every answer hangs;
//     while a share e of its answers are errors, each costing its worker
//     ErrorCost (the service time when 0), and it has a share c of its
//     capacity, it gives at most Workers × (1 − e) / (((1 − e) × S + e ×
//     E) / c) successes a second, S the mean service time, E the error's
//     cost; hanging answers take no worker, so a share of them costs only
//     the retry that replaces it.
//   - A request that starts within its deadline before the downstream
//     comes back may still succeed once it has (a retry then): each end of
//     a total outage adds the requests of one deadline, at the offered
//     rate for an open loop, one per caller for a closed one, in the share
//     of the offered load the downstream then gives (none when it comes
//     back failing every call).
//
// It is an upper bound: no stack knows when the downstream heals, nor
// which answer will hang, and requests ending just before the fault or
// after the horizon are not counted, so a stack can end a little above it
// only by that margin.
func Ceiling(srv Server, sc Scenario, ld Load) float64 {
	offered := ld.Rate
	overlap := ld.Rate * ld.Deadline.Seconds()
	closed := offered <= 0 && ld.Pace > 0
	if closed {
		offered = float64(ld.Callers) / ld.Pace.Seconds()
		overlap = float64(ld.Callers)
	}
	service := srv.MeanService().Seconds()
	const step = 10 * time.Millisecond
	var total float64
	down := false
	for at := time.Duration(0); at < sc.Horizon; at += step {
		var f Fault
		if at < sc.Length {
			f = sc.Fault(at)
		}
		if f.Down || f.Hang >= 1 {
			down = true
			continue
		}
		c := f.Capacity
		if c <= 0 || c > 1 {
			c = 1
		}
		e := f.Errors
		if e >= 1 {
			continue
		}
		cost := service
		if srv.ErrorCost > 0 {
			cost = srv.ErrorCost.Seconds()
		}
		perSuccess := ((1-e)*service + e*cost) / c / (1 - e) // worker seconds a success takes
		offers := offered
		if closed && f.Delay > ld.Pace {
			offers = float64(ld.Callers) / f.Delay.Seconds()
		}
		give := min(offers, float64(srv.Workers)/perSuccess)
		if down {
			total += overlap * give / offered // as many as it then gives
			down = false
		}
		total += give * step.Seconds()
	}
	return total
}
