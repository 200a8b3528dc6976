package endpoint

import (
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/attempt"
)

// Outcome is how a call sent to an endpoint ended, as its load-balancing
// layer reads the protocol's answer.
type Outcome int

const (
	// Answered: the endpoint answered (a success, or an answer that says
	// nothing against its health, such as a caller's error). It counts
	// as a failure while the endpoint's typical answer time (a moving
	// average) is past the slow threshold.
	Answered Outcome = iota
	// Failed: the endpoint failed the call (unavailable, an internal
	// error, an HTTP 5xx, a reset connection).
	Failed
	// Ended: a deadline or a cancellation ended the call before its
	// answer. It counts as a failure if the call ran past the slow
	// threshold (a hang), else as nothing (the caller's own end).
	Ended
	// NotSent: the call was not sent (the balancer's pick was dropped,
	// the connection not ready after all): nothing for or against the
	// endpoint.
	NotSent
)

var (
	errFailed = breaker.Failure(errors.New("endpoint: the endpoint failed the call"))
	errSlow   = breaker.Failure(errors.New("endpoint: slower than the typical endpoint by far"))
	errEnded  = breaker.Neutral(errors.New("endpoint: the call ended before its answer"))
)

// Pass is the admission of one call to an endpoint by [Pick]: report the
// call's outcome with Done exactly once. The zero Pass (a pick that no
// breaker admitted, or of an endpoint outside the set) does nothing.
type Pass struct {
	ep     *Endpoint
	permit breaker.Permit
	start  time.Time
}

// Endpoint returns the endpoint the pass admits to (nil for the zero Pass).
func (p Pass) Endpoint() *Endpoint { return p.ep }

// Done reports the call's outcome.
func (p Pass) Done(o Outcome) {
	ep := p.ep
	if ep == nil {
		return
	}
	now := time.Now()
	took := now.Sub(p.start)
	s := ep.set
	ep.inflight.Add(-1)
	ep.progress.Store(int64(now.Sub(s.epoch)))
	slow := s.slow.Load()
	switch o {
	case NotSent:
		p.permit.Done(errEnded)
		return
	case Failed:
		ep.slowOnly.Store(false)
		p.permit.Done(errFailed)
	case Ended:
		// A call a deadline ended is judged by its own time: one that ran
		// past the threshold is a hang.
		if slow > 0 && int64(took) > slow {
			ep.slowOnly.Store(false)
			p.permit.Done(errSlow)
		} else {
			p.permit.Done(errEnded)
		}
	default:
		// An answer is slow when it is, and its endpoint's typical time
		// is too: one late answer (a pause of the server's, of the
		// client's) is not a slow endpoint, and a stall of the whole
		// client moves every endpoint's typical time and the median with
		// them.
		if typical := ep.observe(took); slow > 0 && int64(took) > slow && typical > float64(slow) {
			ep.slowOnly.Store(true)
			p.permit.Done(errSlow)
		} else {
			p.permit.Done(nil)
		}
	}
	if n := s.dones.Add(1); n%16 == 0 {
		s.judge()
	}
}

// observe moves the endpoint's typical latency toward took, and returns
// it.
func (ep *Endpoint) observe(took time.Duration) float64 {
	x := float64(took)
	for {
		old := ep.ewma.Load()
		v := math.Float64frombits(old)
		nv := x
		if old != 0 {
			nv = v + 0.2*(x-v)
		}
		nv = max(nv, 1)
		if ep.ewma.CompareAndSwap(old, math.Float64bits(nv)) {
			return nv
		}
	}
}

// judge sets the slow threshold from the endpoints' typical latencies:
// their median (the lower one of an even count), so that a slow minority
// does not move it.
func (s *Set) judge() {
	if s.s.SlowFactor < 0 || !s.judging.TryLock() {
		return
	}
	defer s.judging.Unlock()
	var buf [16]float64
	lat := buf[:0]
	for _, ep := range s.Endpoints() {
		if v := math.Float64frombits(ep.ewma.Load()); v > 0 {
			lat = append(lat, v)
		}
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	m := lat[(len(lat)-1)/2]
	s.slow.Store(int64(max(m*s.s.SlowFactor, m+float64(s.s.SlowMargin))))
}

// SlowThreshold returns how long a call may take before it counts against
// its endpoint (0: the set has not seen enough answers to tell).
func (s *Set) SlowThreshold() time.Duration { return time.Duration(s.slow.Load()) }

// Admit asks ep's breaker to admit one call of ctx. It reports false for an
// ejected endpoint (open, or probing with its probes taken).
func (s *Set) Admit(ctx context.Context, ep *Endpoint) (Pass, bool) {
	return s.admit(ctx, ep, time.Now())
}

func (s *Set) admit(ctx context.Context, ep *Endpoint, now time.Time) (Pass, bool) {
	permit, err := ep.b.Allow(ctx)
	if err != nil {
		return Pass{}, false
	}
	if c := attempt.Of(ctx); c != nil {
		c.Try(ep.id)
	}
	if ep.inflight.Add(1) == 1 {
		ep.progress.Store(int64(now.Sub(s.epoch)))
	}
	return Pass{ep: ep, permit: permit, start: now}, true
}

// stuck reports an endpoint that has calls in flight and has ended none
// for longer than the slow threshold: a hang in the making, which picks
// pass by before any call to it has failed (nothing is counted against
// it for that).
func (s *Set) stuck(ep *Endpoint, now time.Time) bool {
	slow := s.slow.Load()
	return slow > 0 && ep.inflight.Load() > 0 && int64(now.Sub(s.epoch))-ep.progress.Load() > slow
}

// spare reports a probe of ep to pass by: ep's breaker is not closed (a
// call admitted now would be its probe) and call may not be retried,
// while a call that may (whose retry goes elsewhere if the probe fails)
// has had one open stay to come.
func (s *Set) spare(call *attempt.Call, ep *Endpoint, now time.Time) bool {
	if ep.b.State() == breaker.StateClosed || call.Repeatable() {
		return false
	}
	t := int64(now.Sub(s.epoch))
	since := ep.awaited.Load()
	if since == 0 {
		ep.awaited.CompareAndSwap(0, t)
		return true
	}
	return t-since < int64(s.s.Breaker.OpenTimeout)
}

// Pick chooses the endpoint for one call of ctx among up to n candidates,
// which next yields in the load balancer's order (with the endpoint each
// one goes to; nil for one outside the set, which is taken as it is). It
// skips an ejected endpoint, one whose calls in flight have ended none for
// longer than the slow threshold (a hang in the making), a probe for a
// call that may not be retried (until calls that may have had an open
// stay to probe), and one that an
// earlier attempt of the same adapter call tried (a retry, a hedge) while
// another is admitted; when every candidate is skipped it takes the first
// stuck one, else the first one tried before, else the first candidate,
// admitted if its breaker admits it, and else without a pass (nothing it may eject is left: the
// cap keeps at least one endpoint, whose probes may be taken).
func Pick[C any](ctx context.Context, s *Set, n int, next func() (C, *Endpoint, error)) (C, Pass, error) {
	call := attempt.Of(ctx)
	now := time.Now()
	// The candidates passed by, in the order they are taken when no
	// other is admitted: one stuck (a suspicion), one this call tried (a
	// failure it saw), the first.
	var fall [3]struct {
		c  C
		ep *Endpoint
	}
	for i := range max(n, 1) {
		c, ep, err := next()
		if err != nil {
			return c, Pass{}, err
		}
		if ep == nil {
			return c, Pass{}, nil
		}
		if i == 0 {
			fall[2].c, fall[2].ep = c, ep
		}
		if call != nil && call.Tried(ep.id) {
			if fall[1].ep == nil {
				fall[1].c, fall[1].ep = c, ep
			}
			continue
		}
		if s.stuck(ep, now) {
			if fall[0].ep == nil {
				fall[0].c, fall[0].ep = c, ep
			}
			continue
		}
		if call != nil && s.spare(call, ep, now) {
			continue
		}
		if p, ok := s.admit(ctx, ep, now); ok {
			return c, p, nil
		}
	}
	for _, f := range fall {
		if f.ep != nil {
			if p, ok := s.admit(ctx, f.ep, now); ok {
				return f.c, p, nil
			}
		}
	}
	return fall[2].c, Pass{}, nil
}
