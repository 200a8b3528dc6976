package breaker

import (
	"time"

	"github.com/callguard/callguard/internal/bridge"
	"github.com/sony/gobreaker/v2"
)

func init() {
	bridge.BreakerOpenUntil = func(b any) time.Time {
		if b, _ := b.(*Breaker); b != nil {
			return b.openUntil()
		}
		return time.Time{}
	}
	bridge.BreakerWatch = func(b any, key string, fn any) func() {
		bb, _ := b.(*Breaker)
		f, _ := fn.(func(StateChange))
		if bb != nil && f != nil {
			return bb.watch(key, f)
		}
		return func() {}
	}
	bridge.BreakerMarked = func(err error) bool { return markOf(err) != markNone }
	bridge.BreakerNotFailure = func(err error) bool { return markOf(err) == markNotFailure }
	bridge.BreakerFailure = func(err error) bool { return markOf(err) == markFailure }
	bridge.BreakerClean = func(b any) bool {
		bb, _ := b.(*Breaker)
		return bb != nil && bb.clean()
	}
}

// watch adds fn to the receivers of the breaker's state changes, under
// key: see notifier. A breaker made by FromGobreaker reports its changes
// to its own OnStateChange only: its watchers receive nothing.
func (b *Breaker) watch(key string, fn func(StateChange)) (unwatch func()) {
	if b.adapted() {
		return func() {}
	}
	n := b.note.Load()
	if n == nil {
		b.note.CompareAndSwap(nil, &notifier{name: b.s.Name})
		n = b.note.Load()
	}
	id := n.watch(key, fn)
	return func() { n.unwatch(id) }
}

// openUntil returns the first instant at which the breaker admits a call
// again: just after the end of its open stay, or the zero time if it
// admits calls now or cannot tell.
func (b *Breaker) openUntil() time.Time {
	var until time.Time
	switch {
	case b.m != nil:
		if g := b.m.cur.Load(); g.state == StateOpen && g.manual == OverrideNone {
			until = g.expiry.Add(1) // it leaves open strictly after the stay
		}
	case b.gb != nil && !b.adapted():
		if e := b.gb.open.Load(); e != nil {
			until = e.Until // past once the stay is over
		}
	}
	if !until.IsZero() && !time.Now().Before(until) {
		return time.Time{}
	}
	return until
}

// clean reports whether the breaker is closed with no failure counted
// against it now, without advancing an open stay that is over or
// delivering state changes. A breaker made by FromGobreaker is judged by
// what its gobreaker was after the last call through it that could change
// it (see noteGobreaker), and by the failures it counts now: asking its
// state may call the user's OnStateChange, which must not run under the
// caller's lock.
func (b *Breaker) clean() bool {
	switch {
	case b.m != nil:
		return b.m.clean()
	case b.adapted():
		return b.gb.seen.Load()&1 == 0 && b.gb.cb.Counts().TotalFailures == 0
	case b.gb != nil:
		// State queues a change, delivers none; Counts are the closed
		// state's since its interval began.
		return b.gb.cb.State() == gobreaker.StateClosed && b.gb.cb.Counts().TotalFailures == 0
	}
	return false
}

func init() {
	bridge.BreakerOpenRemote = func(b any, until time.Time) bool {
		bb, _ := b.(*Breaker)
		return bb != nil && bb.m != nil && bb.m.remote(true, until)
	}
	bridge.BreakerCloseRemote = func(b any) bool {
		bb, _ := b.(*Breaker)
		return bb != nil && bb.m != nil && bb.m.remote(false, time.Time{})
	}
	bridge.BreakerForgive = func(b any, since time.Time) {
		if bb, _ := b.(*Breaker); bb != nil && bb.m != nil {
			bb.m.forgive(since)
		}
	}
	bridge.BreakerCondemn = func(b any, began time.Time) {
		if bb, _ := b.(*Breaker); bb != nil && bb.m != nil {
			bb.m.condemn(began)
		}
	}
	bridge.BreakerTrip = func(b any) time.Time {
		bb, _ := b.(*Breaker)
		if bb == nil || bb.m == nil {
			return time.Time{}
		}
		return bb.m.trip()
	}
}

// trip opens a closed breaker as its own rules would (the open stay
// growing with MaxOpenTimeout), for a shared breaker whose fleet's counts
// met its rule, and returns when it admits calls again (zero if it was not
// closed, or is forced or disabled).
func (m *machine) trip() time.Time {
	m.mu.Lock()
	now := time.Now()
	g := m.advance(now)
	var until time.Time
	if g.state == StateClosed && g.manual == OverrideNone {
		until = m.set(StateOpen, now).expiry.Add(1)
	}
	m.mu.Unlock()
	m.b.deliver()
	return until
}

// forgive takes back the failures counted since since, which an adaptive
// attempt timeout inside the breaker found to be slow answers it had cut,
// not failures of the downstream: a closed breaker's run of failures is
// cleared (a rate window keeps its counts), and a breaker that opened
// since then closes. A forced or disabled breaker is left alone.
func (m *machine) forgive(since time.Time) {
	m.mu.Lock()
	now := time.Now()
	g := m.cur.Load()
	switch {
	case g.manual != OverrideNone:
	case g.state == StateClosed:
		g.consec.Store(0)
	case m.openedAt != 0 && m.openedAt-1 >= m.stamp(since):
		m.set(StateClosed, now)
		m.streak = 0
	}
	m.mu.Unlock()
	m.b.deliver()
}

// condemn opens a closed breaker whose run of failures began by began
// and has reached ConsecutiveFailures, without waiting out
// ConsecutiveFor: an adaptive attempt timeout inside it found the
// attempts it cut to be hangs, by a scout that began at began (a run that
// began later is other failures, which it says nothing of). A forced or
// disabled breaker is left alone.
func (m *machine) condemn(began time.Time) {
	m.mu.Lock()
	now := time.Now()
	g := m.advance(now)
	if g.state == StateClosed && g.manual == OverrideNone && m.s.ConsecutiveFailures > 0 &&
		g.consec.Load() >= uint64(m.s.ConsecutiveFailures) && g.runStart <= m.stamp(began) {
		m.set(StateOpen, now)
	}
	m.mu.Unlock()
	m.b.deliver()
}

// remote applies a change another instance made to a shared breaker: open
// until until, the first instant it admits a call again (a closed or
// half-open breaker opens; an open one stays open at least until then,
// and BreakerOpenUntil then reads until back), or close. A forced or
// disabled breaker is left alone. It reports whether the breaker's state
// or stay changed.
func (m *machine) remote(open bool, until time.Time) bool {
	m.mu.Lock()
	now := time.Now()
	g := m.advance(now)
	expiry := until.Add(-1) // it leaves open strictly after its expiry
	changed := false
	switch {
	case g.manual != OverrideNone:
	case open && !until.After(now):
	case open && (g.state != StateOpen || expiry.After(g.expiry)):
		from := g.state
		ng := &gen{state: StateOpen, expiry: expiry, rej: &OpenError{Name: m.s.Name, Until: until}}
		if from != StateOpen {
			m.b.opens.Add(1)
			m.lastStay = until.Sub(now)
		}
		m.cur.Store(ng)
		if from != StateOpen {
			m.b.push(from, StateOpen, now)
		}
		changed = true
	case !open && g.state != StateClosed:
		m.set(StateClosed, now)
		m.closedAt = m.stamp(now) // closed now, not at the end of a stay it cut short
		changed = true
	}
	m.mu.Unlock()
	m.b.deliver()
	return changed
}
