package timeout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/internal/deadline"
)

// ErrTimeout matches every timeout of this package: errors.Is(err,
// ErrTimeout). Such errors also match context.DeadlineExceeded.
var ErrTimeout = errors.New("timeout: deadline exceeded")

// Error is returned when this policy's deadline ended the call.
type Error struct {
	Timeout time.Duration // the timeout that fired
	Err     error         // what the call returned, if anything
}

// Error says which timeout fired.
func (e *Error) Error() string {
	if e.Err == nil || errors.Is(e.Err, context.DeadlineExceeded) {
		return fmt.Sprintf("timeout: call exceeded %v", e.Timeout)
	}
	return fmt.Sprintf("timeout: call exceeded %v: %v", e.Timeout, e.Err)
}

// Is matches [ErrTimeout] and context.DeadlineExceeded.
func (e *Error) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}

// Unwrap returns the call's own error.
func (e *Error) Unwrap() error { return e.Err }

// Policy bounds each call it runs. It is safe for concurrent use. Create one
// with [New]; the zero value is not usable.
type Policy struct {
	d        time.Duration
	cause    *Error
	declared []bridge.Quantile // by increasing Q
	adaptive *tracker
	x        bridge.Timeout // what the chain knows of it (see hooks.go)
}

// Option configures a [Policy].
type Option interface{ apply(*config) }

type config struct {
	p    *Policy
	errs []error
	ad   *AdaptiveOptions
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// Latency declares a point of the downstream's healthy latency: a fraction
// q of its calls take at most d (e.g. Latency(0.99, 250*time.Millisecond)).
// It may be given several times. A chain's lint warns when the timeout is
// below a declared latency: the calls above it would time out and count as
// failures on a healthy downstream.
func Latency(q float64, d time.Duration) Option {
	return optionFunc(func(c *config) {
		switch {
		case !(q > 0 && q <= 1):
			c.errs = append(c.errs, fmt.Errorf("timeout: Latency(%v, %v): q must be within (0, 1]", q, d))
		case d <= 0:
			c.errs = append(c.errs, fmt.Errorf("timeout: Latency(%v, %v): latency must be > 0", q, d))
		}
		c.p.declared = append(c.p.declared, bridge.Quantile{Q: q, Latency: d})
	})
}

// New returns a Policy with timeout d (the starting value with [Adaptive]),
// or an error naming the invalid argument.
func New(d time.Duration, opts ...Option) (*Policy, error) {
	if d <= 0 {
		return nil, fmt.Errorf("timeout: New(%v): the timeout must be > 0", d)
	}
	c := &config{p: &Policy{d: d, cause: &Error{Timeout: d}}}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("timeout: nil Option")
		}
		o.apply(c)
	}
	if c.ad != nil {
		t, err := newTracker(d, *c.ad)
		if err != nil {
			c.errs = append(c.errs, err)
		}
		c.p.adaptive = t
	}
	if len(c.errs) > 0 {
		return nil, c.errs[0]
	}
	slices.SortStableFunc(c.p.declared, func(a, b bridge.Quantile) int {
		switch {
		case a.Q < b.Q:
			return -1
		case a.Q > b.Q:
			return 1
		}
		return 0
	})
	for i := 1; i < len(c.p.declared); i++ {
		a, b := c.p.declared[i-1], c.p.declared[i]
		switch {
		case a.Q == b.Q:
			return nil, fmt.Errorf("timeout: Latency(%v, …) given twice", a.Q)
		case a.Latency > b.Latency:
			return nil, fmt.Errorf("timeout: Latency(%v, %v) and Latency(%v, %v): a higher quantile cannot be faster", a.Q, a.Latency, b.Q, b.Latency)
		}
	}
	c.p.x = c.p.bridged()
	return c.p, nil
}

// Timeout returns the current timeout: the fixed one, or the adaptive
// value now.
func (p *Policy) Timeout() time.Duration {
	if p.adaptive != nil {
		return p.adaptive.current()
	}
	return p.d
}

// String returns "timeout(300ms)" or "timeout(adaptive 300ms)".
func (p *Policy) String() string {
	if p.adaptive != nil {
		return fmt.Sprintf("timeout(adaptive %v)", p.Timeout())
	}
	return fmt.Sprintf("timeout(%v)", p.d)
}

// Do runs call with a deadline of the policy's timeout from now, unless the
// caller's deadline is sooner. When this policy's deadline ends the call,
// Do returns an [*Error] (matching [ErrTimeout] and
// context.DeadlineExceeded); otherwise the call's own result.
func (p *Policy) Do(ctx context.Context, call func(context.Context) error) error {
	d, scout := p.start(ctx)
	if d <= 0 {
		return errZero
	}
	var start time.Time
	if dl, ok := ctx.Deadline(); ok {
		start = time.Now()
		if dl.Sub(start) <= d {
			err := call(ctx) // the caller's deadline comes first: no context of ours
			p.observe(start, err, false, scout)
			return err
		}
	} else if p.adaptive != nil {
		start = time.Now()
	}
	cause := p.cause
	if cause.Timeout != d {
		cause = &Error{Timeout: d}
	}
	actx, cancel := context.WithTimeoutCause(ctx, d, cause)
	defer cancel() // also when call panics
	err := call(actx)
	// Ours if our timer ended the context (even if the caller's context has
	// ended since, while the call ignored ours), or its deadline passed
	// with the context still alive (the downstream may report the deadline
	// it was sent before our timer fires).
	fired := err != nil && (context.Cause(actx) == error(cause) || actx.Err() == nil && deadline.Passed(actx))
	p.observe(start, err, fired, scout)
	if fired && err != nil {
		return &Error{Timeout: d, Err: err}
	}
	return err
}

// start returns the timeout of a call starting now, and whether it is the
// adaptive timeout's scout (see scout.go).
func (p *Policy) start(ctx context.Context) (time.Duration, bool) {
	if p.adaptive != nil {
		return p.adaptive.start(ctx)
	}
	return p.d, false
}

var errZero = errors.New("timeout: a zero Policy has no timeout; make one with timeout.New")

// Expired reports whether err comes from this package's timeouts.
func Expired(err error) bool { return errors.Is(err, ErrTimeout) }

// observe feeds the adaptive timeout a call that started at start and
// ended with err (fired: this timeout ended it; scout: it ran at the
// ceiling, see scout.go), and returns a scout's verdict.
func (p *Policy) observe(start time.Time, err error, fired, scout bool) bridge.Verdict {
	t := p.adaptive
	if t == nil {
		return bridge.Verdict{}
	}
	// Only an answer tells a latency. A call our timeout cut took at least
	// the timeout, but recorded at the timeout it would let every hang
	// raise the estimate that decides the next timeout (issue #21): it is
	// counted apart, as a cut, and failures and calls the caller's
	// deadline ended are left out.
	answer := err == nil && !fired
	if scout {
		now := time.Now()
		took := now.Sub(start)
		normal := t.current()
		if answer {
			t.record(took)
		}
		// fired, for a scout: its deadline (its ceiling, or the
		// caller's) ended it.
		return t.scouted(normal, took, answer, fired, now)
	}
	switch {
	case answer:
		t.record(time.Since(start))
		if dt := t.doubt.Load(); dt != nil && dt.pending.Load() {
			t.answered(dt)
		}
	case fired:
		t.cut(time.Now())
	}
	return bridge.Verdict{}
}
