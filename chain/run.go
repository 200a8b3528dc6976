package chain

import (
	"context"
	"errors"
	"time"

	"github.com/callguard/callguard/timeout"
)

// frame is the state a call carries down the chain: the soonest deadline of
// the timeouts passed so far, not yet turned into a context.
type frame struct {
	deadline time.Time
	timeout  time.Duration // the timeout that set deadline
	owner    int           // the step that set it, or -1
	hold     bool          // under DoHolding: attempt contexts may be held
}

// run executes step i and everything inside it.
func (c *Chain) run(ctx context.Context, i int, f frame, call func(context.Context) error) error {
	if i == len(c.steps) {
		return c.call(ctx, f, call)
	}
	s := &c.steps[i]
	switch s.kind {
	case kindTimeout:
		now := time.Now()
		dl, d := s.t.Deadline(now)
		if f.owner < 0 || dl.Before(f.deadline) {
			f.deadline, f.timeout, f.owner = dl, d, i
		}
		if !s.t.IsAdaptive() {
			return c.run(ctx, i+1, f, call)
		}
		err := c.run(ctx, i+1, f, call)
		s.t.Observe(now, err, f.owner == i && err != nil && timeout.Expired(err) && !time.Now().Before(dl))
		return err

	case kindRetry:
		return s.r.DoUntil(ctx, f.deadline, func(ctx context.Context) error {
			return c.run(ctx, i+1, f, call)
		})

	case kindBreaker:
		p, err := s.b.Allow(ctx)
		if err != nil {
			return err
		}
		finished := false
		defer func() {
			if !finished {
				p.Done(errPanicked)
			}
		}()
		err = c.run(ctx, i+1, f, call)
		finished = true
		// A deadline from a timeout outside the breaker is the caller's,
		// as far as the breaker is concerned.
		if err != nil && f.owner >= 0 && f.owner < i && !time.Now().Before(f.deadline) {
			p.Abandon()
		} else {
			p.Done(err)
		}
		return err

	case kindFallback:
		if f.owner >= 0 {
			// The fallback runs within the timeouts around it: make their
			// deadline a context first, as for an opaque policy.
			return c.call(ctx, f, func(ctx context.Context) error {
				return c.fallback(ctx, i, frame{owner: -1, hold: f.hold}, call)
			})
		}
		return c.fallback(ctx, i, f, call)
	}

	// An opaque policy sees a real context: turn the pending deadline into
	// one first.
	if f.owner >= 0 {
		return c.call(ctx, f, func(ctx context.Context) error {
			return s.p.Do(ctx, func(ctx context.Context) error {
				return c.run(ctx, i+1, frame{owner: -1, hold: f.hold}, call)
			})
		})
	}
	return s.p.Do(ctx, func(ctx context.Context) error {
		return c.run(ctx, i+1, frame{owner: -1, hold: f.hold}, call)
	})
}

// fallback runs the fallback step i and everything inside it.
func (c *Chain) fallback(ctx context.Context, i int, f frame, call func(context.Context) error) error {
	s := &c.steps[i]
	err := c.run(ctx, i+1, f, call)
	if s.f.Covers(ctx, err) {
		return s.f.Fallback(ctx, err)
	}
	return err
}

// call runs call with the pending deadline, making the one context of the
// attempt, unless the caller's own deadline is as soon.
func (c *Chain) call(ctx context.Context, f frame, call func(context.Context) error) error {
	if f.owner < 0 {
		return call(ctx)
	}
	if dl, ok := ctx.Deadline(); ok && !dl.After(f.deadline) {
		return call(ctx)
	}
	cause := c.steps[f.owner].t.Cause(f.timeout)
	actx, cancel := context.WithDeadlineCause(ctx, f.deadline, cause)
	if f.hold || holdable(ctx) {
		a := newAttempt(ctx, actx, cancel) // the call may take the cancellation over
		defer a.finish()
		return attemptError(actx, cause, f, call(a))
	}
	defer cancel()
	return attemptError(actx, cause, f, call(actx))
}

// attemptError reports an attempt that the fused deadline ended as a
// timeout. It is ours if our timer ended the context (even if the caller's
// context has ended since, while the call ignored ours), or if its
// deadline passed with the context still alive: the downstream may report
// the deadline it was sent before our timer fires.
func attemptError(actx context.Context, cause error, f frame, err error) error {
	if err != nil && (context.Cause(actx) == cause || actx.Err() == nil && !time.Now().Before(f.deadline)) {
		return &timeout.Error{Timeout: f.timeout, Err: err}
	}
	return err
}

var errPanicked = errors.New("chain: call panicked")
