package chain

import (
	"context"
	"errors"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/internal/deadline"
	"github.com/callguard/callguard/internal/deferred"
	"github.com/callguard/callguard/internal/hold"
	"github.com/callguard/callguard/timeout"
)

// frame is the state a call carries down the chain: the soonest deadline of
// the timeouts passed so far, not yet turned into a context.
type frame struct {
	deadline time.Time
	timeout  time.Duration // the timeout that set deadline
	owner    int           // the step that set it, or -1
	hold     bool          // under doHolding: attempt contexts may be held
	deferred *deferred.Set // breakers hand the permits of successes here
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
		dl, d := s.tx.Deadline(now)
		if f.owner < 0 || dl.Before(f.deadline) {
			f.deadline, f.timeout, f.owner = dl, d, i
		}
		if !s.tx.Adaptive && !s.inBreaker {
			return c.run(ctx, i+1, f, call)
		}
		err := c.run(ctx, i+1, f, call)
		if err != nil && s.inBreaker {
			err = judge(ctx, s.tp(), i, f, now, err)
		}
		if s.tx.Adaptive {
			s.tx.Observe(now, err, f.owner == i && err != nil && timeout.Expired(err) && !time.Now().Before(dl))
		}
		return err

	case kindRetry:
		// The first attempt here, the retries in the policy: the closure
		// for them, which escapes through the bridge, is made only on a
		// failure.
		if s.rx.Deposit != nil {
			s.rx.Deposit()
		}
		err := c.run(ctx, i+1, f, call)
		if err == nil {
			return nil
		}
		return s.rx.Continue(ctx, f.deadline, err, func(ctx context.Context) error {
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
		if err == nil {
			if f.deferred != nil {
				f.deferred.Add(p) // the adapter reports the final outcome
			} else {
				p.Done(nil)
			}
			return nil
		}
		// A deadline from a timeout outside the breaker is the caller's, as
		// far as the breaker is concerned, unless a timeout inside judged
		// the attempt (see judge).
		if f.owner >= 0 && f.owner < i && !time.Now().Before(f.deadline) && !bridge.BreakerMarked(err) {
			p.DoneNeutral()
		} else {
			p.Done(err)
		}
		if until := bridge.BreakerOpenUntil(s.b); !until.IsZero() {
			// The breaker is open: a retry outside learns when it admits
			// again, and does not wait for a rejection.
			err = &bridge.OpenAfter{Err: err, Until: until}
		}
		return err

	case kindFallback:
		if f.owner >= 0 {
			// The fallback runs within the timeouts around it: make their
			// deadline a context first, as for an opaque policy.
			return c.call(ctx, f, func(ctx context.Context) error {
				return c.fallback(ctx, i, frame{owner: -1, hold: f.hold, deferred: f.deferred}, call)
			})
		}
		return c.fallback(ctx, i, f, call)
	}

	// An opaque policy sees a real context: turn the pending deadline into
	// one first.
	if f.owner >= 0 {
		return c.call(ctx, f, func(ctx context.Context) error {
			return s.p.Do(ctx, func(ctx context.Context) error {
				return c.run(ctx, i+1, frame{owner: -1, hold: f.hold, deferred: f.deferred}, call)
			})
		})
	}
	return s.p.Do(ctx, func(ctx context.Context) error {
		return c.run(ctx, i+1, frame{owner: -1, hold: f.hold, deferred: f.deferred}, call)
	})
}

// judge decides how an attempt under the timeout t (step i, started at
// start) that ended with err counts for the breakers outside it, when a
// deadline other than t's ended it: the caller's, or an outer timeout's.
// Such an attempt is neutral to a breaker (the caller gave up), unless it
// had already run longer than a healthy downstream takes (t's patience:
// its declared tail latency, its adaptive estimate, or half the timeout):
// then it is marked a failure, so that a hung downstream still trips the
// breaker when every caller is more impatient than the attempt timeout.
// An error an adapter has already marked keeps its mark.
func judge(ctx context.Context, t *timeout.Policy, i int, f frame, start time.Time, err error) error {
	now := time.Now()
	cut := f.owner >= 0 && f.owner != i && !now.Before(f.deadline)
	if !cut {
		cut = deadline.Passed(ctx)
	}
	if !cut || now.Sub(start) < bridge.TimeoutPatience(t) || bridge.BreakerMarked(err) {
		return err
	}
	return breaker.Failure(err)
}

// fallback runs the fallback step i and everything inside it.
func (c *Chain) fallback(ctx context.Context, i int, f frame, call func(context.Context) error) error {
	s := &c.steps[i]
	err := c.run(ctx, i+1, f, call)
	if s.fx.Covers(ctx, err) {
		return s.fx.Answer(ctx, err)
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
	cause := c.steps[f.owner].tx.CauseOf(f.timeout)
	actx, cancel := context.WithDeadlineCause(ctx, f.deadline, cause)
	if f.hold || hold.Holdable(ctx) {
		a := hold.NewAttempt(ctx, actx, cancel) // the call may take the cancellation over
		defer a.Finish()
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
