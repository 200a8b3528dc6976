// Package deferred holds the breaker permits of a call whose outcome is not
// known when it returns: an HTTP response is a success when its headers
// arrive, but its body may still stall or fail. The chain hands the
// permits of a successful attempt to a Set instead of reporting them, and
// its adaptive attempt timeouts' observations of it (an answer's latency
// runs to the end of its body, and a body the attempt timeout cut is a
// cut); the adapter reports them once the body is read or closed.
package deferred

import (
	"sync"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/bridge"
)

// Observation is what an adaptive attempt timeout will be told of the
// attempt that succeeded: it started at Start under the deadline Deadline,
// which this timeout set if Own; Scout as bridge.Timeout.Start said. A
// scout's verdict goes to the breakers outside step Step of Chain
// (bridge.ChainVerdict).
type Observation struct {
	Timeout         *bridge.Timeout
	Start, Deadline time.Time // Deadline: the attempt's (the caller's, if sooner)
	Own, Scout      bool
	Chain           any
	Step            int
}

// done tells the timeout the attempt ended with err, now.
func (o *Observation) done(err error) {
	fired := (o.Own || o.Scout) && err != nil && !time.Now().Before(o.Deadline)
	if v := o.Timeout.Observe(o.Start, err, fired, o.Scout); v != (bridge.Verdict{}) {
		bridge.ChainVerdict(o.Chain, o.Step, v)
	}
}

// Set is the deferred permits of one call. The chain adds to it for an
// attempt that succeeded, and the adapter reports it once, after the call
// has returned (an HTTP exchange hands the response over to its caller in
// between, which orders the two). Adds may come at once: two attempts of
// a call may both succeed for the breakers they passed (a user's policy
// that runs two attempts at once, with a fallback inside the breaker that
// answers the one the adapter refused). The zero Set is empty.
type Set struct {
	mu    sync.Mutex
	first breaker.Permit // the usual case: one breaker
	n     int
	more  *[]breaker.Permit // the others, rarely any
	obs   *[]Observation    // the adaptive timeouts', if any
}

// Observe keeps o until Done. It allocates: only a chain with an adaptive
// attempt timeout has observations to defer.
func (s *Set) Observe(o Observation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.obs == nil {
		s.obs = &[]Observation{o}
		return
	}
	*s.obs = append(*s.obs, o)
}

// Add keeps p until Done.
func (s *Set) Add(p breaker.Permit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.n == 0:
		s.first = p
	case s.more == nil:
		s.more = &[]breaker.Permit{p}
	default:
		*s.more = append(*s.more, p)
	}
	s.n++
}

// Done reports err, the outcome of the call, to every observation kept,
// then to every permit, once, and empties the set: an adaptive timeout's
// scout that forgives the breakers does so before this call's own outcome
// is counted.
func (s *Set) Done(err error) {
	s.mu.Lock()
	obs, n, first, more := s.obs, s.n, s.first, s.more
	s.obs, s.n, s.first, s.more = nil, 0, breaker.Permit{}, nil
	s.mu.Unlock()
	if obs != nil {
		for i := range *obs {
			(*obs)[i].done(err)
		}
	}
	if n == 0 {
		return
	}
	first.Done(err)
	if more != nil {
		for _, p := range *more {
			p.Done(err)
		}
	}
}

// Len returns the number of permits kept.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}
