// Package deferred holds the breaker permits of a call whose outcome is not
// known when it returns: an HTTP response is a success when its headers
// arrive, but its body may still stall or fail. The chain hands the
// permits of a successful attempt to a Set instead of reporting them; the
// adapter reports them once the body is read or closed.
package deferred

import "github.com/callguard/callguard/breaker"

// Set is the deferred permits of one call. It is not safe for concurrent
// use: the chain adds to it for the attempt that succeeded — on the
// call's goroutine, or on a hedge's, where the adapter lets one attempt
// only succeed (httpmw's exchange), and the hedge's Finish, which waits
// for that goroutine, orders the add before the call returns — and the
// adapter reports it once, after the call has returned (an HTTP exchange
// hands the response over to its caller in between, which orders the
// two). The zero Set is empty.
type Set struct {
	first breaker.Permit // the usual case: one breaker
	n     int
	more  *[]breaker.Permit // the others, rarely any
}

// Add keeps p until Done.
func (s *Set) Add(p breaker.Permit) {
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

// Done reports err, the outcome of the call, to every permit kept, once,
// and empties the set.
func (s *Set) Done(err error) {
	if s.n == 0 {
		return
	}
	first, more := s.first, s.more
	*s = Set{}
	first.Done(err)
	if more != nil {
		for _, p := range *more {
			p.Done(err)
		}
	}
}

// Len returns the number of permits kept.
func (s *Set) Len() int { return s.n }
