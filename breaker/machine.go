package breaker

import (
	"sync"
	"sync/atomic"
	"time"
)

// machine is the native engine. Each state the breaker enters is a new,
// immutable-state *gen published through an atomic pointer: calls in closed
// and rejections in open read it without a lock, outcomes of a generation
// that has ended are ignored (as in gobreaker), and clearing the counters on
// a transition is just a new gen.
type machine struct {
	b   *Breaker
	s   *Settings
	cur atomic.Pointer[gen]

	mu sync.Mutex // serializes transitions, failures and half-open accounting

	// For MaxOpenTimeout growth, guarded by mu: streak counts the trips
	// since the run began; lastStay is the last open stay and closedAt when
	// the breaker last closed. A close ends the run, except with
	// SkipHalfOpen: the close at the end of a stay then ends it only once
	// the breaker has stayed closed for lastStay (see set).
	streak   int
	lastStay time.Duration
	closedAt stamp
	openedAt stamp // when it last opened, plus 1 (0: never), guarded by mu

	probes, probeFailures atomic.Uint64

	timed bool      // SlowCall is on: calls need a start time
	epoch time.Time // what start stamps count from
}

type gen struct {
	state  State
	expiry time.Time // open: leave open strictly after this

	// rej is the error of every rejection in this generation (open, and
	// half-open with its probe quota used up): one per generation, so that
	// a rejection allocates nothing.
	rej *OpenError

	// closed
	consec   atomic.Uint64
	runStart stamp // when the run of failures began; guarded by machine.mu
	tw       *timeWindow
	cw       *countWindow

	// half-open, guarded by machine.mu
	admitted, succeeded, failed int

	manual Override // set by an operator (see control.go)
}

func newMachine(b *Breaker) *machine {
	now := time.Now()
	m := &machine{b: b, s: &b.s, timed: b.s.SlowCall > 0, epoch: now}
	m.cur.Store(m.newGen(StateClosed, now))
	return m
}

func (m *machine) newGen(st State, now time.Time) *gen {
	g := &gen{state: st}
	if st == StateClosed {
		switch {
		case m.s.WindowCalls > 0:
			g.cw = newCountWindow(m.s.WindowCalls)
		case m.s.Window > 0:
			g.tw = newTimeWindow(now, m.s.Window)
		}
	}
	return g
}

// allow admits a call or rejects it. It returns the generation the call
// belongs to and, with SlowCall on, its start time.
func (m *machine) allow() (*gen, stamp, error) {
	g := m.cur.Load()
	switch g.state {
	case StateClosed:
		var start stamp
		if m.timed {
			start = m.stamp(time.Now())
		}
		return g, start, nil
	case StateOpen:
		if !g.expiry.Before(time.Now()) {
			m.b.rejectedOpen.Add(1)
			return nil, 0, g.rej
		}
	}
	return m.allowLocked()
}

func (m *machine) allowLocked() (*gen, stamp, error) {
	m.mu.Lock()
	now := time.Now()
	g := m.advance(now)
	var err error
	switch g.state {
	case StateOpen:
		m.b.rejectedOpen.Add(1)
		err = g.rej
	case StateHalfOpen:
		if g.admitted >= m.s.HalfOpenProbes {
			m.b.rejectedProbes.Add(1)
			err = g.rej
		} else {
			g.admitted++
			m.probes.Add(1)
		}
	}
	m.mu.Unlock()
	if err == nil {
		// A panicking OnStateChange must not keep a probe slot: the call
		// will not be made. It counts as neutral.
		defer func() {
			if r := recover(); r != nil {
				m.done(g, m.stamp(now), neutral)
				panic(r)
			}
		}()
	}
	m.b.deliver()
	if err != nil {
		return nil, 0, err
	}
	return g, m.stamp(now), nil
}

// advance ends an open stay that is over; the caller holds m.mu.
func (m *machine) advance(now time.Time) *gen {
	g := m.cur.Load()
	if g.state == StateOpen && g.manual == OverrideNone && g.expiry.Before(now) {
		if m.s.SkipHalfOpen {
			return m.set(StateClosed, now)
		}
		return m.set(StateHalfOpen, now)
	}
	return g
}

// set moves the breaker to st; the caller holds m.mu.
func (m *machine) set(st State, now time.Time) *gen {
	prev := m.cur.Load()
	from := prev.state
	g := m.newGen(st, now)
	switch st {
	case StateOpen:
		if m.s.SkipHalfOpen && m.elapsed(m.closedAt, now) >= m.lastStay {
			// Closed for as long as the last stay without a trip: the
			// close that ended it was for good, and the run is over.
			m.streak = 0
		}
		stay := m.openStay()
		m.openedAt = m.stamp(now) + 1
		g.expiry = now.Add(stay)
		g.rej = &OpenError{Name: m.s.Name, Until: g.expiry.Add(1)} // it leaves open strictly after the stay
		m.streak++
		m.lastStay = stay
		m.b.opens.Add(1)
	case StateHalfOpen:
		g.rej = &OpenError{Name: m.s.Name, Probes: true}
	case StateClosed:
		m.closedAt = m.stamp(now)
		if from == StateOpen {
			m.closedAt = m.stamp(prev.expiry) // SkipHalfOpen: closed since the stay ended
		}
		if !m.s.SkipHalfOpen {
			m.streak = 0
		}
	}
	m.cur.Store(g)
	m.b.push(from, st, now)
	return g
}

// openStay is OpenTimeout doubled once per trip in the current run (since
// the last close; with SkipHalfOpen, since the last close that lasted),
// capped at MaxOpenTimeout.
func (m *machine) openStay() time.Duration {
	d := m.s.OpenTimeout
	for i := 0; i < m.streak && d < m.s.MaxOpenTimeout; i++ {
		if d > m.s.MaxOpenTimeout/2 {
			d = m.s.MaxOpenTimeout // doubling would pass it, or overflow
			break
		}
		d *= 2
	}
	if m.s.MaxOpenTimeout > 0 && d > m.s.MaxOpenTimeout {
		d = m.s.MaxOpenTimeout
	}
	return d
}

// done records the outcome of a call admitted in generation g.
func (m *machine) done(g *gen, start stamp, o outcome) {
	if g.state == StateClosed && (o == success || o == neutral) && g == m.cur.Load() {
		if o == neutral {
			m.b.neutral.Add(1)
			return
		}
		var now time.Time
		if m.timed {
			now = time.Now()
			if m.elapsed(start, now) > m.s.SlowCall {
				m.doneLocked(g, o, true)
				return
			}
		}
		// The fast path: a success in closed takes no lock.
		if g.consec.Load() != 0 {
			g.consec.Store(0)
		}
		switch {
		case g.tw != nil:
			if now.IsZero() {
				now = time.Now()
			}
			g.tw.addCall(now)
		case g.cw != nil:
			g.cw.add(slotOK)
		}
		m.b.successes.Add(1)
		return
	}
	m.doneLocked(g, o, o == slowCut)
}

func (m *machine) doneLocked(g *gen, o outcome, slow bool) {
	m.b.count(o)
	if g.state == StateHalfOpen && o == failure {
		m.probeFailures.Add(1)
	}
	m.mu.Lock()
	now := time.Now()
	if g != m.advance(now) {
		// An outcome of a state that has ended counts for nothing, but like
		// any event it ends an open stay that is over (as in gobreaker).
		m.mu.Unlock()
		m.b.deliver()
		return
	}
	switch g.state {
	case StateClosed:
		switch o {
		case failure:
			if g.consec.Add(1) == 1 {
				g.runStart = m.stamp(now)
			}
		case success:
			g.consec.Store(0)
		}
		switch {
		case g.tw != nil:
			g.tw.addCall(now)
			g.tw.addBad(now, o == failure, slow)
		case g.cw != nil:
			code := slotSlow
			if o == failure {
				code = slotFail
			}
			g.cw.add(code)
		}
		if m.shouldTrip(g, now) {
			m.set(StateOpen, now)
		}
	case StateHalfOpen:
		switch o {
		case success:
			g.succeeded++
			if g.succeeded >= m.s.HalfOpenSuccesses {
				m.set(StateClosed, now)
			}
		case failure:
			g.failed++
			if m.s.HalfOpenProbes-g.failed < m.s.HalfOpenSuccesses {
				m.set(StateOpen, now)
			}
		default:
			g.admitted-- // a neutral probe gives its slot back
		}
	}
	m.mu.Unlock()
	m.b.deliver()
}

// shouldTrip evaluates the trip rules in closed; the caller holds m.mu.
func (m *machine) shouldTrip(g *gen, now time.Time) bool {
	s := m.s
	if g.manual == OverrideDisabled {
		return false
	}
	if s.ConsecutiveFailures > 0 && g.consec.Load() >= uint64(s.ConsecutiveFailures) &&
		m.elapsed(g.runStart, now) >= s.ConsecutiveFor {
		return true
	}
	var calls, fails, slow uint64
	switch {
	case g.tw != nil:
		calls, fails, slow = g.tw.sums(now)
	case g.cw != nil:
		calls, fails, slow = g.cw.sums()
	default:
		return false
	}
	if calls == 0 || calls < uint64(s.MinCalls) {
		return false
	}
	return reached(fails, calls, s.FailureRate) || reached(slow, calls, s.SlowCallRate)
}

// reached reports n/calls >= rate for an enabled (non-zero) rate.
func reached(n, calls uint64, rate float64) bool {
	return rate > 0 && float64(n) >= rate*float64(calls)-1e-9
}

func (m *machine) state() State {
	g := m.cur.Load()
	if g.state != StateOpen || !g.expiry.Before(time.Now()) {
		return g.state
	}
	m.mu.Lock()
	g = m.advance(time.Now())
	m.mu.Unlock()
	m.b.deliver()
	return g.state
}

// clean reports a closed breaker with no failure counted against it: no
// run of failures, no failure or slow call in its window.
func (m *machine) clean() bool {
	g := m.cur.Load()
	if g.state != StateClosed || g.consec.Load() != 0 {
		return false
	}
	switch {
	case g.cw != nil:
		return g.cw.fails.Load() == 0 && g.cw.slow.Load() == 0
	case g.tw != nil:
		m.mu.Lock()
		_, fails, slow := g.tw.sums(time.Now())
		m.mu.Unlock()
		return fails == 0 && slow == 0
	}
	return true
}

func (m *machine) fill(c *Counts) {
	c.Probes = m.probes.Load()
	c.ProbeFailures = m.probeFailures.Load()
	if g := m.cur.Load(); g.state == StateClosed {
		c.ConsecutiveFailures = g.consec.Load()
	}
}

// stamp is a call's start time, as the time since the machine's epoch (a
// monotonic reading, in a word instead of a time.Time's three).
type stamp int64

func (m *machine) stamp(now time.Time) stamp { return stamp(now.Sub(m.epoch)) }

// elapsed is how long before now a call stamped start began.
func (m *machine) elapsed(start stamp, now time.Time) time.Duration {
	return now.Sub(m.epoch) - time.Duration(start)
}
