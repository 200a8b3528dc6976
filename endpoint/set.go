package endpoint

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/bridge"
)

// Set is the endpoints of one service (a gRPC channel's, an HTTP host's),
// each with its breaker. It is safe for concurrent use.
type Set struct {
	name  string
	s     Settings
	epoch time.Time

	mu   sync.Mutex
	eps  map[string]*Endpoint // by address
	list atomic.Pointer[[]*Endpoint]

	ejected atomic.Int32 // endpoints ejected now
	slow    atomic.Int64 // the slow threshold in ns (0: not enough answers yet)
	dones   atomic.Uint32
	judging sync.Mutex // one recomputation of slow at a time
}

// Endpoint is one backend of a Set.
type Endpoint struct {
	set  *Set
	addr string
	id   uint64
	b    *breaker.Breaker

	ewma atomic.Uint64 // the float64 bits of the answers' latency in ns (0: none yet)
	// inflight is its calls picked and not done; progress, when one of
	// them last ended or, from idle, began (ns since the set's epoch).
	inflight atomic.Int32
	progress atomic.Int64
	// awaited is when a probe of it was first passed by for a call that
	// may not be retried, in this state of its breaker (ns since the
	// set's epoch; 0: none).
	awaited atomic.Int64
	// slowOnly: the last call counted against it was a slow answer (not
	// a failure, not a hang).
	slowOnly atomic.Bool
	ejected  atomic.Bool // its breaker is open or half-open, counted in set.ejected
	gone     atomic.Bool // removed from its set

	ejections, readmissions, capped atomic.Uint64
}

var ids atomic.Uint64

// NewSet returns an empty set named name (in Change and Status; the
// breakers are named name/address).
func NewSet(name string, s Settings) (*Set, error) {
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	set := &Set{name: name, s: s, epoch: time.Now(), eps: map[string]*Endpoint{}}
	set.list.Store(new([]*Endpoint))
	return set, nil
}

// Name returns the set's name.
func (s *Set) Name() string { return s.name }

// Update makes addrs the set's endpoints: new ones are added with a
// closed breaker, those not in addrs removed (an ejected one that is
// removed frees its place in the ejection cap). An address listed twice
// is one endpoint.
func (s *Set) Update(addrs []string) {
	s.mu.Lock()
	keep := make(map[string]bool, len(addrs))
	var changed bool
	for _, a := range addrs {
		keep[a] = true
		if s.eps[a] == nil {
			s.eps[a] = s.newEndpoint(a)
			changed = true
		}
	}
	for a, ep := range s.eps {
		if !keep[a] {
			delete(s.eps, a)
			ep.gone.Store(true)
			if ep.ejected.CompareAndSwap(true, false) {
				s.ejected.Add(-1)
			}
			changed = true
		}
	}
	if changed {
		list := make([]*Endpoint, 0, len(s.eps))
		for _, ep := range s.eps {
			list = append(list, ep)
		}
		slices.SortFunc(list, func(a, b *Endpoint) int { return compare(a.addr, b.addr) })
		s.list.Store(&list)
	}
	s.mu.Unlock()
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Endpoint returns the endpoint at addr, or nil if it is not in the set.
func (s *Set) Endpoint(addr string) *Endpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eps[addr]
}

// Endpoints returns the set's endpoints, sorted by address. The slice is
// the set's own: do not modify it.
func (s *Set) Endpoints() []*Endpoint { return *s.list.Load() }

func (s *Set) newEndpoint(addr string) *Endpoint {
	ep := &Endpoint{set: s, addr: addr, id: ids.Add(1)}
	bs := s.s.Breaker
	if bs.Name != "" {
		bs.Name += "/" + addr
	} else {
		bs.Name = addr
	}
	user := bs.OnStateChange
	bs.OnStateChange = func(from, to breaker.State) {
		ep.changed(to)
		if user != nil {
			user(from, to)
		}
	}
	b, err := breaker.New(bs)
	if err != nil {
		// Not reached: the settings were checked by NewSet with another
		// name and the same rules.
		panic("endpoint: " + err.Error())
	}
	ep.b = b
	return ep
}

// changed follows ep's breaker to state to: an opening ejects ep within
// the cap (beyond it the breaker is closed again), a closing readmits it.
func (ep *Endpoint) changed(to breaker.State) {
	s := ep.set
	ep.awaited.Store(0)
	switch to {
	case breaker.StateHalfOpen:
		// Its probes start its typical time afresh: the answers of its
		// bad time must not fail the probes of a healed endpoint.
		ep.ewma.Store(0)
	case breaker.StateOpen:
		if ep.ejected.Load() || ep.gone.Load() {
			return
		}
		for {
			n := s.ejected.Load()
			if int(n) >= s.s.maxEjected(len(s.Endpoints())) {
				if !ep.slowOnly.Load() && s.displace() {
					continue
				}
				ep.capped.Add(1)
				bridge.BreakerCloseRemote(ep.b)
				s.tell(Change{Service: s.name, Endpoint: ep.addr, Capped: true})
				return
			}
			if s.ejected.CompareAndSwap(n, n+1) {
				break
			}
		}
		ep.ejected.Store(true)
		ep.ejections.Add(1)
		s.tell(Change{Service: s.name, Endpoint: ep.addr, Ejected: true})
	case breaker.StateClosed:
		if ep.ejected.CompareAndSwap(true, false) {
			s.ejected.Add(-1)
			ep.readmissions.Add(1)
			s.tell(Change{Service: s.name, Endpoint: ep.addr})
		}
	}
}

// displace readmits an endpoint ejected for slow answers alone, to make
// room in the cap for one that fails its calls: a slow answer is still an
// answer, a failed call is lost to a caller that may not retry. It reports
// whether it readmitted one.
func (s *Set) displace() bool {
	for _, other := range s.Endpoints() {
		if other.ejected.Load() && other.slowOnly.Load() && bridge.BreakerCloseRemote(other.b) {
			return true
		}
	}
	return false
}

func (s *Set) tell(c Change) {
	if s.s.OnChange != nil {
		s.s.OnChange(c)
	}
}

// Addr returns the endpoint's address.
func (ep *Endpoint) Addr() string { return ep.addr }

// Breaker returns the endpoint's breaker (for its state and counts; an
// operator's Force and Disable act on it as on any breaker).
func (ep *Endpoint) Breaker() *breaker.Breaker { return ep.b }

// Ejected reports whether the endpoint is ejected now (its breaker open
// or probing, within the cap).
func (ep *Endpoint) Ejected() bool { return ep.ejected.Load() }

// Status is an endpoint's state, for telemetry and tests.
type Status struct {
	Service, Endpoint string
	State             breaker.State
	Ejected           bool
	// Ejections, Readmissions and Capped count the endpoint's ejections,
	// readmissions and the openings of its breaker the cap did not eject.
	Ejections, Readmissions, Capped uint64
	// Latency is the endpoint's typical answer time (a moving average; 0:
	// no answer yet).
	Latency time.Duration
	Counts  breaker.Counts
}

// Status returns the endpoint's state.
func (ep *Endpoint) Status() Status {
	return Status{Service: ep.set.name, Endpoint: ep.addr, State: ep.b.State(), Ejected: ep.ejected.Load(),
		Ejections: ep.ejections.Load(), Readmissions: ep.readmissions.Load(), Capped: ep.capped.Load(),
		Latency: time.Duration(math.Float64frombits(ep.ewma.Load())), Counts: ep.b.Counts()}
}

// Statuses returns the state of each endpoint of the set, by address.
func (s *Set) Statuses() []Status {
	list := s.Endpoints()
	out := make([]Status, len(list))
	for i, ep := range list {
		out[i] = ep.Status()
	}
	return out
}
