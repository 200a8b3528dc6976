package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sony/gobreaker/v2"
)

// State is the state of a [Breaker].
type State int

const (
	// StateClosed lets every call through and counts outcomes.
	StateClosed State = iota
	// StateOpen rejects every call with an [*OpenError] matching [ErrOpen].
	StateOpen
	// StateHalfOpen admits a few probe calls to test the downstream.
	StateHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateOpen:
		return "open"
	case StateHalfOpen:
		return "half-open"
	default:
		return fmt.Sprintf("State(%d)", int(s))
	}
}

// Counts is a snapshot of a breaker's lifetime totals and of its current
// state's counters.
//
// Each call that asked to pass ends as exactly one of Successes, Failures,
// SlowUnanswered, Neutral, RejectedOpen or RejectedProbes; Requests is
// their sum, so calls still in flight are not in it yet.
type Counts struct {
	Requests       uint64 // calls that were rejected or have reported an outcome
	Successes      uint64 // admitted calls that succeeded
	Failures       uint64 // admitted calls that failed
	SlowUnanswered uint64 // admitted calls the caller's deadline ended after SlowCall: slow calls (native engine only; see Settings.SlowCall)
	Neutral        uint64 // admitted calls that were neither (caller's cancellation, Neutral errors, IsExcluded)
	RejectedOpen   uint64 // rejected because open
	RejectedProbes uint64 // rejected in half-open because the probe quota was used up
	Probes         uint64 // calls admitted in half-open (native engine only)
	ProbeFailures  uint64 // probes that failed, including those that returned after a re-open (native engine only)
	Opens          uint64 // transitions into open

	// ConsecutiveFailures is the current run of failures in closed.
	ConsecutiveFailures uint64
}

// Breaker is a circuit breaker. It is safe for concurrent use. Create one with
// [New] or [FromGobreaker]; the zero value is not usable.
type Breaker struct {
	s    Settings                 // normalized; zero for an adapted gobreaker
	m    *machine                 // native engine, or nil
	gb   *gbEngine                // gobreaker engine (or adapted), or nil
	note atomic.Pointer[notifier] // nil until there is a receiver of state changes

	// successes is written by every successful call: it spreads over
	// cache lines of its own once concurrent calls fight over it.
	successes stripedCounter

	failures, neutral            atomic.Uint64
	slowUnanswered               atomic.Uint64
	rejectedOpen, rejectedProbes atomic.Uint64
	opens                        atomic.Uint64
}

// New returns a Breaker for s, or a [*SettingsError] naming the first invalid
// field.
func New(s Settings) (*Breaker, error) {
	s, err := s.normalize()
	if err != nil {
		return nil, err
	}
	b := &Breaker{s: s}
	if s.OnStateChange != nil {
		n := &notifier{fn: s.OnStateChange, name: s.Name}
		n.active.Store(true)
		b.note.Store(n)
	}
	if s.Engine == EngineGobreaker {
		b.gb = &gbEngine{probes: &OpenError{Name: s.Name, Probes: true}}
		b.gb.cb = newGobreakerEngine(b)
	} else {
		b.m = newMachine(b)
	}
	return b, nil
}

// Settings returns the breaker's settings with every default filled in. For a
// breaker made by [FromGobreaker] it returns the zero Settings with Engine
// set to EngineGobreaker: the wrapped breaker's settings are not visible.
func (b *Breaker) Settings() Settings { return b.s }

// String describes the breaker: its trip rules, its open stay and its
// probes, e.g. "breaker(5 consecutive, open 10s, 3 probes)",
// "breaker payments(50% of 10s, open 5s→30s, 2 of 3 probes)" (a stay that
// grows to MaxOpenTimeout, closing on 2 successes among 3 probes) or
// "breaker(5 consecutive, open 1s, no half-open)" (SkipHalfOpen).
func (b *Breaker) String() string {
	switch {
	case b.adapted():
		return "breaker(gobreaker)"
	case b.m == nil && b.gb == nil:
		return "breaker(zero value: make one with breaker.New)"
	}
	s := b.s
	var rules string
	if s.ConsecutiveFailures > 0 {
		rules = fmt.Sprintf("%d consecutive", s.ConsecutiveFailures)
		if s.ConsecutiveFor > 0 {
			rules += fmt.Sprintf(" over %v", s.ConsecutiveFor)
		}
	}
	add := func(r string) {
		if rules != "" {
			rules += " or "
		}
		rules += r
	}
	win := s.Window.String()
	if s.WindowCalls > 0 {
		win = fmt.Sprintf("%d calls", s.WindowCalls)
	}
	if s.FailureRate > 0 {
		add(fmt.Sprintf("%g%% of %s", s.FailureRate*100, win))
	}
	if s.SlowCallRate > 0 {
		add(fmt.Sprintf("%g%% slower than %v of %s", s.SlowCallRate*100, s.SlowCall, win))
	}
	name := "breaker"
	if s.Name != "" {
		name += " " + s.Name
	}
	open := s.OpenTimeout.String()
	if s.MaxOpenTimeout > s.OpenTimeout {
		open += "→" + s.MaxOpenTimeout.String()
	}
	var probes string
	switch {
	case s.SkipHalfOpen:
		probes = "no half-open"
	case s.HalfOpenSuccesses < s.HalfOpenProbes:
		probes = fmt.Sprintf("%d of %d probes", s.HalfOpenSuccesses, s.HalfOpenProbes)
	case s.HalfOpenProbes == 1:
		probes = "1 probe"
	default:
		probes = fmt.Sprintf("%d probes", s.HalfOpenProbes)
	}
	return fmt.Sprintf("%s(%s, open %s, %s)", name, rules, open, probes)
}

// Permit is the admission of one call by [Breaker.Allow]. Report the call's
// outcome with [Permit.Done] (or [Permit.DoneNeutral]) exactly once, from any
// goroutine. The zero Permit's Done does nothing.
type Permit struct {
	b     *Breaker
	g     *gen
	ctx   context.Context
	start stamp
	gdone func(error)
}

// Allow asks the breaker to admit one call: the two-step form of
// [Breaker.Do] for interceptors and streams. On success, run the call and
// pass its error to [Permit.Done]; ctx is the caller's context, used to tell
// the caller's own cancellation from a failure. On rejection the error is an
// [*OpenError] naming the breaker, matching [ErrOpen].
func (b *Breaker) Allow(ctx context.Context) (Permit, error) {
	if b.m != nil {
		g, start, err := b.m.allow()
		if err != nil {
			return Permit{}, err
		}
		return Permit{b: b, g: g, ctx: ctx, start: start}, nil
	}
	done, err := b.allowGobreaker()
	if err != nil {
		return Permit{}, err
	}
	return Permit{b: b, ctx: ctx, gdone: done}, nil
}

func (b *Breaker) allowGobreaker() (func(error), error) {
	if b.gb == nil {
		return nil, errZero
	}
	done, err := b.gb.cb.Allow()
	if err == nil {
		// A panicking OnStateChange must not keep gobreaker's request
		// slot: the call will not be made.
		defer func() {
			if r := recover(); r != nil {
				b.count(neutral)
				done(gobreakerOutcome(b, neutral, context.Canceled))
				panic(r)
			}
		}()
	}
	b.deliver()
	if err != nil {
		if b.adapted() {
			b.noteGobreaker(true)
		}
		if errors.Is(err, gobreaker.ErrTooManyRequests) {
			b.rejectedProbes.Add(1)
			return nil, b.gb.probes
		}
		b.rejectedOpen.Add(1)
		if e := b.gb.open.Load(); e != nil {
			return nil, e
		}
		return nil, &OpenError{Name: b.gb.cb.Name()} // not reached: gobreaker opened first
	}
	return done, nil
}

// Done reports the outcome of the admitted call: err is the call's error.
func (p Permit) Done(err error) {
	if p.b == nil {
		return
	}
	p.b.done(p.ctx, p.g, p.start, p.gdone, err)
}

// DoneNeutral reports the admitted call's outcome as neutral: it ended
// because of its caller, for example at an enclosing deadline that a chain
// enforces inside the breaker. It counts like the caller's own cancellation,
// neither success nor failure (never as slow: see Settings.SlowCall; the
// chain marks with [Failure] the attempts it judges slow). Call it instead
// of Done.
func (p Permit) DoneNeutral() {
	if p.b == nil {
		return
	}
	p.b.record(p.g, p.start, p.gdone, neutral, context.Canceled)
}

func (b *Breaker) done(ctx context.Context, g *gen, start stamp, gdone func(error), err error) {
	b.record(g, start, gdone, b.classify(ctx, g, start, err), err)
}

func (b *Breaker) record(g *gen, start stamp, gdone func(error), o outcome, err error) {
	if g != nil {
		b.m.done(g, start, o)
		return
	}
	b.count(o)
	gdone(gobreakerOutcome(b, o, err))
	if b.adapted() && (err != nil || b.gb.seen.Load()&1 != 0) {
		b.noteGobreaker(false)
	}
	b.deliver()
}

// Do runs call if the breaker admits it and records its outcome. A rejected
// call is not run and Do returns an [*OpenError], matching [ErrOpen];
// otherwise Do returns call's error unchanged. A call that panics is
// recorded as a failure and the panic goes on.
func (b *Breaker) Do(ctx context.Context, call func(context.Context) error) error {
	var (
		g     *gen
		start stamp
		gdone func(error)
		err   error
	)
	if b.m != nil {
		g, start, err = b.m.allow()
	} else {
		gdone, err = b.allowGobreaker()
	}
	if err != nil {
		return err
	}
	finished := false
	defer func() {
		if !finished {
			b.done(ctx, g, start, gdone, errPanicked)
		}
	}()
	err = call(ctx)
	finished = true
	b.done(ctx, g, start, gdone, err)
	return err
}

var (
	errPanicked = errors.New("breaker: call panicked")
	errZero     = errors.New("breaker: a zero Breaker admits no call; make one with breaker.New")
)

// State returns the current state. An open breaker whose stay has ended
// reports half-open (or closed with SkipHalfOpen), as the next call would
// find it.
func (b *Breaker) State() State {
	if b.m != nil {
		return b.m.state()
	}
	if b.gb == nil {
		return StateOpen // a zero Breaker: it admits nothing
	}
	st := b.gb.cb.State()
	b.deliver()
	return fromGobreakerState(st)
}

// Counts returns a snapshot of the breaker's counters.
func (b *Breaker) Counts() Counts {
	c := Counts{
		Successes:      b.successes.Load(),
		Failures:       b.failures.Load(),
		SlowUnanswered: b.slowUnanswered.Load(),
		Neutral:        b.neutral.Load(),
		RejectedOpen:   b.rejectedOpen.Load(),
		RejectedProbes: b.rejectedProbes.Load(),
		Opens:          b.opens.Load(),
	}
	c.Requests = c.Successes + c.Failures + c.SlowUnanswered + c.Neutral + c.RejectedOpen + c.RejectedProbes
	if b.m != nil {
		b.m.fill(&c)
	} else if b.gb != nil {
		c.ConsecutiveFailures = uint64(b.gb.cb.Counts().ConsecutiveFailures)
	}
	return c
}

func (b *Breaker) count(o outcome) {
	switch o {
	case success:
		b.successes.Add(1)
	case failure:
		b.failures.Add(1)
	case slowCut:
		b.slowUnanswered.Add(1)
	default:
		b.neutral.Add(1)
	}
}
