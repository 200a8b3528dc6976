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
	// nothing against its health, such as a caller's error). An answer
	// slower than the slow threshold counts as a failure.
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
	took := time.Since(p.start)
	s := ep.set
	slow := s.slow.Load()
	late := slow > 0 && int64(took) > slow
	switch {
	case o == NotSent:
		p.permit.Done(errEnded)
		return
	case o == Failed:
		p.permit.Done(errFailed)
	case o == Ended && late:
		p.permit.Done(errSlow)
	case o == Ended:
		p.permit.Done(errEnded)
	case late:
		ep.observe(took)
		p.permit.Done(errSlow)
	default:
		ep.observe(took)
		p.permit.Done(nil)
	}
	if n := s.dones.Add(1); n%16 == 0 {
		s.judge()
	}
}

// observe moves the endpoint's typical latency toward took.
func (ep *Endpoint) observe(took time.Duration) {
	x := float64(took)
	for {
		old := ep.ewma.Load()
		v := math.Float64frombits(old)
		nv := x
		if old != 0 {
			nv = v + 0.2*(x-v)
		}
		if ep.ewma.CompareAndSwap(old, math.Float64bits(max(nv, 1))) {
			return
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
	permit, err := ep.b.Allow(ctx)
	if err != nil {
		return Pass{}, false
	}
	if c := attempt.Of(ctx); c != nil {
		c.Try(ep.id)
	}
	return Pass{ep: ep, permit: permit, start: time.Now()}, true
}

// Pick chooses the endpoint for one call of ctx among up to n candidates,
// which next yields in the load balancer's order (with the endpoint each
// one goes to; nil for one outside the set, which is taken as it is). It
// skips an ejected endpoint, and one that an earlier attempt of the same
// adapter call tried (a retry, a hedge) while another is admitted; when
// every candidate is skipped it takes the first that was tried before, or
// else the first candidate without a pass (nothing it may eject is left:
// the cap keeps at least one endpoint, whose probes may be taken).
func Pick[C any](ctx context.Context, s *Set, n int, next func() (C, *Endpoint, error)) (C, Pass, error) {
	call := attempt.Of(ctx)
	var first, again C
	var againEP *Endpoint
	for i := range max(n, 1) {
		c, ep, err := next()
		if err != nil {
			return c, Pass{}, err
		}
		if ep == nil {
			return c, Pass{}, nil
		}
		if i == 0 {
			first = c
		}
		if call != nil && call.Tried(ep.id) {
			if againEP == nil {
				again, againEP = c, ep
			}
			continue
		}
		if p, ok := s.Admit(ctx, ep); ok {
			return c, p, nil
		}
	}
	if againEP != nil {
		if p, ok := s.Admit(ctx, againEP); ok {
			return again, p, nil
		}
	}
	return first, Pass{}, nil
}
