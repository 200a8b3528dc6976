package limit

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/internal/deadline"
)

// Defaults applied by [New] to zero fields of [Settings].
const (
	// DefaultInitialLimit and DefaultMaxLimit are Netflix's
	// (concurrency-limits' Gradient2Limit) and failsafe-go's.
	DefaultInitialLimit = 20
	DefaultMaxLimit     = 200
	// DefaultMinLimit is failsafe-go's, not Netflix's 20: a client-side
	// limit that cannot fall below 20 never protects a downstream that
	// copes with fewer than 20 calls at once.
	DefaultMinLimit = 1
)

// Settings configures a [Limiter]. The zero value is valid: Gradient2 with
// its defaults, a limit starting at 20 within [1, 200], no queue.
type Settings struct {
	// Algorithm adjusts the limit from the calls' outcomes: [AIMD] or
	// [Gradient2]. nil: Gradient2(Gradient2Settings{}).
	Algorithm Algorithm

	// InitialLimit is the limit before any call has ended
	// (0: DefaultInitialLimit, lowered to MaxLimit if above it).
	InitialLimit int
	// MinLimit and MaxLimit bound the limit (0: DefaultMinLimit,
	// DefaultMaxLimit; MinLimit <= MaxLimit).
	MinLimit, MaxLimit int

	// MaxQueue is the number of calls that may wait for a slot when the
	// limit is reached, served first come, first served. 0: no queue.
	MaxQueue int
	// MaxWait bounds how long a call waits in the queue before it is
	// rejected (Reason ReasonMaxWait). 0: a queued call waits until a slot
	// frees or its context ends. MaxWait needs MaxQueue > 0.
	MaxWait time.Duration

	// IsDrop reports whether a call's error says the downstream is
	// overloaded: a drop, which the algorithm answers by lowering the
	// limit. It is asked only about non-nil errors of calls whose
	// caller's context had not ended when Done was called (those are
	// neutral). An error it returns false for is ignored: the slot is
	// released and the algorithm learns nothing. nil: [IsDrop].
	IsDrop func(error) bool
}

// IsDrop is the default Settings.IsDrop: an error that matches
// context.DeadlineExceeded (which every timeout of package timeout does),
// unless it also matches callguard.ErrRejected (a refusal by a policy
// inside this one, which never reached the downstream). Other failures are
// ignored, as Netflix's clients ignore them: a fast error tells nothing of
// the downstream's queue, and counted as a sample it would make an
// overloaded downstream look idle.
func IsDrop(err error) bool {
	return !errors.Is(err, callguard.ErrRejected) && errors.Is(err, context.DeadlineExceeded)
}

// normalize validates s and fills its defaults.
func (s Settings) normalize() (Settings, error) {
	switch {
	case s.InitialLimit < 0:
		return s, invalid("Settings.InitialLimit", s.InitialLimit, "must be >= 0")
	case s.MinLimit < 0:
		return s, invalid("Settings.MinLimit", s.MinLimit, "must be >= 0")
	case s.MaxLimit < 0:
		return s, invalid("Settings.MaxLimit", s.MaxLimit, "must be >= 0")
	case s.MaxQueue < 0:
		return s, invalid("Settings.MaxQueue", s.MaxQueue, "must be >= 0")
	case s.MaxWait < 0:
		return s, invalid("Settings.MaxWait", s.MaxWait, "must be >= 0")
	case s.MaxWait > 0 && s.MaxQueue == 0:
		return s, invalid("Settings.MaxWait", s.MaxWait, "needs a queue: set MaxQueue > 0, or MaxWait to 0")
	}
	if s.MinLimit == 0 {
		s.MinLimit = DefaultMinLimit
	}
	if s.MaxLimit == 0 {
		s.MaxLimit = max(DefaultMaxLimit, s.MinLimit)
	}
	if s.MinLimit > s.MaxLimit {
		return s, invalid("Settings.MinLimit", s.MinLimit, "must be <= MaxLimit ("+strconv.Itoa(s.MaxLimit)+")")
	}
	if s.InitialLimit == 0 {
		s.InitialLimit = min(max(DefaultInitialLimit, s.MinLimit), s.MaxLimit)
	}
	if s.InitialLimit < s.MinLimit || s.InitialLimit > s.MaxLimit {
		return s, invalid("Settings.InitialLimit", s.InitialLimit,
			"must be within [MinLimit, MaxLimit] = ["+strconv.Itoa(s.MinLimit)+", "+strconv.Itoa(s.MaxLimit)+"]")
	}
	if s.Algorithm == nil {
		s.Algorithm = Gradient2(Gradient2Settings{})
	}
	a, err := s.Algorithm.normalize()
	if err != nil {
		return s, err
	}
	s.Algorithm = a
	return s, nil
}

// Limiter caps the calls in flight to a downstream at a limit it adjusts
// from how the calls go ([AIMD] on drops, [Gradient2] on latency), with a
// bounded FIFO queue for the calls that find the limit reached. A call
// that finds the queue full, or waits MaxWait in it, is refused with a
// [*RejectedError]; one whose context ends while it waits gets the
// context's error and leaves the queue. A change of the limit applies to
// the next admission; a rise admits queued calls at once, a fall lets the
// calls in flight finish. With [Gradient2], calls past the limit are
// admitted, up to MaxLimit, while its last sample saw the round trips
// steady and far from the callers' deadlines (see Gradient2): InFlight may
// then exceed Limit.
//
// Most callers should use [Limiter.Do]; [Limiter.Acquire] and [Permit] are
// for interceptors and streams. A Limiter is safe for concurrent use.
// Create one with [New]; the zero value admits no call.
type Limiter struct {
	c      core
	s      Settings
	alg    engine
	timed  bool // alg reads round trips
	isDrop func(error) bool
}

// New returns a Limiter for s, or a [*SettingsError] naming the first
// invalid field.
func New(s Settings) (*Limiter, error) {
	s, err := s.normalize()
	if err != nil {
		return nil, err
	}
	l := &Limiter{s: s, isDrop: s.IsDrop}
	l.c.lim = l
	if l.isDrop == nil {
		l.isDrop = IsDrop
	}
	l.c.init(s.InitialLimit, s.MaxQueue, s.MaxWait)
	l.alg = s.Algorithm.engine(&l.c, s)
	l.timed = l.alg.timed()
	return l, nil
}

// Settings returns the limiter's settings with every default filled in,
// the algorithm's included.
func (l *Limiter) Settings() Settings { return l.s }

// Acquire takes a slot for one call, waiting in the queue if the limit is
// reached and the queue has room: the two-step form of [Limiter.Do]. On
// success, make the call and pass its error to [Permit.Done] exactly once
// (or call [Permit.DoneNeutral]); ctx is the caller's context, which tells
// the caller's own end from a drop, and whose deadline Gradient2's
// DeadlineShare reads. It returns a [*RejectedError] if the queue is full
// or the call waited MaxWait, and ctx's error if ctx ended while the call
// waited. A nil ctx never ends.
func (l *Limiter) Acquire(ctx context.Context) (Permit, error) {
	n, err := l.c.acquire(ctx)
	if err != nil {
		return Permit{}, err
	}
	p := Permit{c: &l.c, ctx: ctx, inflight: n}
	if l.timed {
		p.start = time.Now()
		p.budget = deadline.Left(ctx, p.start)
	}
	return p, nil
}

// acquire is Acquire for a call that waits, and ends, with ctx, and whose
// caller's deadline is caller's (see internal/deadline): a chain passes
// the context it was called with, which differs from ctx when a policy
// outside the limit made the attempt a context of its own. Acquire does
// not call it, nor share a helper with it: a call more, returning a
// Permit, cost Acquire 11 ns (BenchmarkLimiterAIMD/serial, 33 → 44 ns).
func (l *Limiter) acquire(ctx, caller context.Context) (Permit, error) {
	n, err := l.c.acquire(ctx)
	if err != nil {
		return Permit{}, err
	}
	p := Permit{c: &l.c, ctx: ctx, inflight: n}
	if l.timed {
		p.start = time.Now()
		p.budget = deadline.Left(caller, p.start)
	}
	return p, nil
}

// Do runs call once a slot is free, feeds its outcome to the algorithm and
// releases the slot. A refused call is not run: Do returns a
// [*RejectedError] (matching [ErrLimited] and callguard.ErrRejected), or
// ctx's error if ctx ended while the call waited. Otherwise Do returns
// call's error unchanged. A call that panics releases its slot without
// feeding the algorithm, and the panic goes on.
func (l *Limiter) Do(ctx context.Context, call func(context.Context) error) error {
	p, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	return p.run(ctx, call)
}

// Limit returns the current limit (0 for the zero Limiter).
func (l *Limiter) Limit() int { return int(l.c.limit.Load()) }

// InFlight returns the number of calls holding a slot; it may exceed the
// limit just after the limit falls.
func (l *Limiter) InFlight() int { return int(l.c.inflight.Load()) }

// Queued returns the number of calls waiting in the queue.
func (l *Limiter) Queued() int { return int(l.c.queued.Load()) }

// done classifies an admitted call's outcome, feeds it to the algorithm
// and releases the slot: nil is a sample; an error after the caller's own
// context ended is neutral; otherwise IsDrop decides between a drop and
// nothing.
func (l *Limiter) done(p *Permit, err error) {
	switch {
	case err == nil:
		l.alg.sample(l.rtt(p), p.budget, p.inflight, false)
	case deadline.Ended(p.ctx) && !judgedFailure(err):
	case l.isDrop(err):
		l.alg.sample(l.rtt(p), p.budget, p.inflight, true)
	}
	l.c.release()
}

// rtt is the time p's call took, if the algorithm reads it.
func (l *Limiter) rtt(p *Permit) time.Duration {
	if !l.timed {
		return 0
	}
	return time.Since(p.start)
}

// Permit is the admission of one call by [Limiter.Acquire] or
// [Bulkhead.Acquire]. Release it with [Permit.Done] or [Permit.DoneNeutral]
// exactly once, from any goroutine: a second release frees a slot another
// call holds. The zero Permit's methods do nothing.
type Permit struct {
	c        *core // its limiter's, whose lim it is, or its bulkhead's
	ctx      context.Context
	start    time.Time
	budget   time.Duration // the caller's time left at admission, if the algorithm reads it (0: no deadline)
	inflight int           // calls in flight at admission, this one included
}

// Done releases the slot. For a [Limiter] it also feeds the algorithm: the
// time from admission to Done, and whether err is a drop (see
// Settings.IsDrop).
func (p Permit) Done(err error) {
	switch {
	case p.c == nil:
	case p.c.lim != nil:
		p.c.lim.done(&p, err)
	default:
		p.c.release()
	}
}

// DoneNeutral releases the slot without feeding the algorithm: the call
// ended for a reason that says nothing of the downstream, for example its
// caller gave up. For a [Bulkhead] it is the same as Done.
func (p Permit) DoneNeutral() {
	if p.c != nil {
		p.c.release()
	}
}

// run makes the call of an admitted permit and releases it.
func (p Permit) run(ctx context.Context, call func(context.Context) error) error {
	finished := false
	defer func() {
		if !finished {
			p.DoneNeutral()
		}
	}()
	err := call(ctx)
	finished = true
	p.Done(err)
	return err
}

// judgedFailure reports an error the chain marked a failure of the
// downstream (see bridge.BreakerFailure), though a context ended it.
func judgedFailure(err error) bool {
	return bridge.BreakerFailure != nil && bridge.BreakerFailure(err)
}
