// Package deferred holds the breaker permits of a call whose outcome is not
// known when it returns: an HTTP response is a success when its headers
// arrive, but its body may still stall or fail. The chain hands the
// permits of a successful attempt to a Set instead of reporting them; the
// adapter reports them once the body is read or closed.
package deferred

import (
	"sync"

	"github.com/callguard/callguard/breaker"
)

// Set is the deferred permits of one call. It is safe for concurrent use;
// the zero Set is empty.
type Set struct {
	mu    sync.Mutex
	small [2]breaker.Permit
	n     int
	more  []breaker.Permit
}

// Add keeps p until Done.
func (s *Set) Add(p breaker.Permit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n < len(s.small) {
		s.small[s.n] = p
	} else {
		s.more = append(s.more, p)
	}
	s.n++
}

// Done reports err, the outcome of the call, to every permit kept, once,
// and empties the set.
func (s *Set) Done(err error) {
	s.mu.Lock()
	n, small, more := s.n, s.small, s.more
	s.n, s.small, s.more = 0, [2]breaker.Permit{}, nil
	s.mu.Unlock()
	for i := range min(n, len(small)) {
		small[i].Done(err)
	}
	for _, p := range more {
		p.Done(err)
	}
}

// Len returns the number of permits kept.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}
