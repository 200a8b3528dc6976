package breaker

import (
	"errors"
	"strconv"
	"time"
)

// Override is a breaker's manual mode: what an operator set with
// [Breaker.ForceOpen] or [Breaker.Disable], until [Breaker.Reset].
type Override int

const (
	// OverrideNone: the breaker follows its trip rules (the default).
	OverrideNone Override = iota
	// OverrideOpen: the breaker rejects every call, with an [*OpenError]
	// whose Forced is set, until Reset. It never goes half-open.
	OverrideOpen
	// OverrideDisabled: the breaker admits every call and counts its
	// outcome, but never trips: its counters (and metrics) go on, its
	// protection is off. It reads closed.
	OverrideDisabled
)

// String returns "none", "open" or "disabled".
func (o Override) String() string {
	switch o {
	case OverrideNone:
		return "none"
	case OverrideOpen:
		return "open"
	case OverrideDisabled:
		return "disabled"
	}
	return "Override(" + strconv.Itoa(int(o)) + ")"
}

// ErrNoManualControl is returned by ForceOpen, Disable and Reset on a
// breaker whose state lives in gobreaker (EngineGobreaker, FromGobreaker):
// gobreaker/v2 can neither be forced nor reset.
var ErrNoManualControl = errors.New("breaker: manual control needs EngineNative: gobreaker/v2 can neither be forced nor reset")

// forcedUntil is the end of a forced open stay: never, in practice (a
// retry outside sees that waiting will not help).
var forcedUntil = time.Unix(1<<40, 0)

// ForceOpen makes the breaker reject every call until Reset, whatever its
// state, for an operator who knows the downstream must not be called (an
// incident, a maintenance). Calls in flight finish, and their outcomes
// count for nothing. State reports StateOpen, Override OverrideOpen, and
// the receivers of state changes are told. It returns
// [ErrNoManualControl] on a gobreaker engine.
func (b *Breaker) ForceOpen() error {
	return b.override(OverrideOpen)
}

// Disable makes the breaker admit every call and never trip, until Reset:
// its counters go on (they are what an operator watches), its protection
// is off, as when a breaker misbehaves on a healthy downstream. State
// reports StateClosed, Override OverrideDisabled. It returns
// [ErrNoManualControl] on a gobreaker engine.
func (b *Breaker) Disable() error {
	return b.override(OverrideDisabled)
}

// Reset ends an override, or clears the breaker's failures: it is closed
// afterwards, with its trip rules in force, an empty window and no run of
// failures (its counters, which count since New, go on). It returns
// [ErrNoManualControl] on a gobreaker engine.
func (b *Breaker) Reset() error {
	return b.override(OverrideNone)
}

// Override returns the breaker's manual mode now.
func (b *Breaker) Override() Override {
	if b.m == nil {
		return OverrideNone
	}
	return b.m.cur.Load().manual
}

func (b *Breaker) override(o Override) error {
	if b.m == nil {
		if b.gb == nil {
			return errZero
		}
		return ErrNoManualControl
	}
	b.m.mu.Lock()
	b.m.control(o, time.Now())
	b.m.mu.Unlock()
	b.deliver()
	return nil
}

// control puts the breaker in mode o; the caller holds m.mu.
func (m *machine) control(o Override, now time.Time) {
	prev := m.cur.Load()
	var g *gen
	switch o {
	case OverrideOpen:
		g = &gen{state: StateOpen, expiry: forcedUntil, manual: o,
			rej: &OpenError{Name: m.s.Name, Forced: true}}
	case OverrideDisabled:
		g = &gen{state: StateClosed, manual: o} // no window: nothing to trip on
	default:
		g = m.newGen(StateClosed, now)
		m.streak, m.lastStay, m.closedAt = 0, 0, m.stamp(now)
	}
	m.cur.Store(g)
	if prev.state != g.state {
		m.b.push(prev.state, g.state, now)
	}
}
