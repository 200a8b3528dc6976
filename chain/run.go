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

// frame is the state a call carries down the chain: the context the chain
// was called with, and the soonest deadline of the timeouts passed so far,
// not yet turned into a context.
type frame struct {
	// caller is the context Do was called with, whose deadline is the
	// caller's (see internal/deadline), whatever contexts the steps make
	// for their attempts.
	caller   context.Context
	deadline time.Time
	timeout  time.Duration // the timeout that set deadline
	owner    int           // the step that set it, or -1
	deferred *deferred.Set // breakers hand the permits of successes here
	hold     bool          // under doHolding: attempt contexts may be held
	// hoisted: a hedge step made the attempt's context (see hedgeStep.hoist),
	// whose deadline is that of the attempt timeouts inside it.
	hoisted bool
}

// fresh is f for what runs inside a step that made its pending deadline a
// context: no deadline pending, the call and its caller the same.
func (f frame) fresh() frame {
	return frame{caller: f.caller, owner: -1, hold: f.hold, deferred: f.deferred}
}

// Each kind of step has a function of its own, and each step knows the
// function of what is inside it (next): a call pays, per step, the stack
// frame of what that step does, with no dispatcher's frame between steps
// (a goroutine's stack that outgrows 8 KiB is copied to one of 16 KiB:
// with 10,000 calls in flight, 80 MB).

// runTimeout runs the timeout step i: its deadline joins the pending one,
// made a context only at the attempt (see call).
func (c *Chain) runTimeout(ctx context.Context, i int, f frame, call func(context.Context) error) error {
	s := &c.steps[i]
	now := time.Now()
	dl, d, scout := s.tx.Deadline(ctx, now)
	if f.owner < 0 || dl.Before(f.deadline) {
		f.deadline, f.timeout, f.owner = dl, d, i
	}
	if !s.tx.Adaptive && !s.inBreaker {
		return s.next(c, ctx, i+1, f, call)
	}
	return c.timeoutDone(ctx, i, f, now, dl, scout, s.next(c, ctx, i+1, f, call))
}

// timeoutDone is the end of the timeout step i, started at start with the
// deadline dl (scout: the adaptive timeout's scout), for an attempt that
// ended with err: a function of its own, whose frame is not on the stack
// while the call runs.
//
//go:noinline
func (c *Chain) timeoutDone(ctx context.Context, i int, f frame, start, dl time.Time, scout bool, err error) error {
	s := &c.steps[i]
	if err != nil && s.inBreaker {
		err = judge(ctx, s.tp(), i, f, start, err)
	}
	if s.tx.Adaptive {
		if err == nil && f.deferred != nil {
			// An answer whose body is still to come (an HTTP response): the
			// adapter reports it when the body is done.
			odl := f.deadline // the soonest of this timeout's and those outside it
			if cdl, ok := ctx.Deadline(); ok && cdl.Before(odl) {
				odl = cdl
			}
			f.deferred.Observe(deferred.Observation{Timeout: s.tx, Start: start, Deadline: odl,
				Own: f.owner == i, Scout: scout, Chain: c, Step: i})
			return nil
		}
		fired := f.owner == i && err != nil && timeout.Expired(err) && !time.Now().Before(dl)
		if scout {
			// A scout runs to its ceiling, a timeout's outside it, or the
			// caller's deadline: any of them ending it says it did not
			// answer in time.
			fired = err != nil && (!time.Now().Before(f.deadline) || deadline.Passed(ctx))
		}
		if v := s.tx.Observe(start, err, fired, scout); v != (bridge.Verdict{}) {
			c.verdict(i, v)
		}
	}
	return err
}

// verdict tells the breakers outside the timeout step i what its scout
// found (see bridge.Verdict): the attempts it cut were slow answers, not
// failures, or hangs.
func (c *Chain) verdict(i int, v bridge.Verdict) {
	for j := range i {
		if c.steps[j].kind != kindBreaker {
			continue
		}
		if !v.Forgive.IsZero() {
			bridge.BreakerForgive(c.steps[j].p, v.Forgive)
		}
		if !v.Hung.IsZero() {
			bridge.BreakerCondemn(c.steps[j].p, v.Hung)
		}
	}
}

// runRetry runs the retry step i: the first attempt here, the retries in
// the policy. The closure for them, which escapes through the bridge, is
// made only on a failure.
func (c *Chain) runRetry(ctx context.Context, i int, f frame, call func(context.Context) error) error {
	s := &c.steps[i]
	if s.rx.Deposit != nil {
		s.rx.Deposit()
	}
	err := s.next(c, ctx, i+1, f, call)
	if err == nil {
		if s.rx.Succeeded != nil {
			s.rx.Succeeded() // the retry's throttle: a call that succeeded
		}
		return nil
	}
	var reserve time.Duration
	if s.rx.Fit {
		reserve = c.attemptTimeout(i)
	}
	return s.rx.Continue(ctx, f.deadline, reserve, err, func(ctx context.Context) error {
		return s.next(c, ctx, i+1, f, call)
	})
}

// attemptTimeout is the timeout an attempt of the retry step i gets now:
// the first timeout inside it (an adaptive one's value now), 0 if none.
//
//go:noinline
func (c *Chain) attemptTimeout(i int) time.Duration {
	for j := i + 1; j < len(c.steps); j++ {
		if s := &c.steps[j]; s.kind == kindTimeout {
			return s.tx.Planned()
		}
	}
	return 0
}

// runBreaker runs the breaker step i.
func (c *Chain) runBreaker(ctx context.Context, i int, f frame, call func(context.Context) error) error {
	s := &c.steps[i]
	p, err := s.bp().Allow(ctx)
	if err != nil {
		return err
	}
	finished := false
	defer panicked(&p, &finished)
	err = s.next(c, ctx, i+1, f, call)
	finished = true
	if err == nil {
		succeeded(f.deferred, &p)
		return nil
	}
	return c.breakerFailed(i, f, p, err)
}

// panicked reports a call that panicked to the permit p that admitted it,
// unless it finished.
//
//go:noinline
func panicked(p *breaker.Permit, finished *bool) {
	if !*finished {
		p.Done(errPanicked)
	}
}

// succeeded reports a success to p, or hands p to set, whose adapter
// reports the final outcome.
//
//go:noinline
func succeeded(set *deferred.Set, p *breaker.Permit) {
	if set != nil {
		set.Add(*p)
	} else {
		p.Done(nil)
	}
}

// breakerFailed reports the failed attempt err to the permit p of the
// breaker step i: a function of its own, whose frame is not on the stack
// while the call runs.
//
//go:noinline
func (c *Chain) breakerFailed(i int, f frame, p breaker.Permit, err error) error {
	// A deadline from a timeout outside the breaker is the caller's, as
	// far as the breaker is concerned, unless a timeout inside judged
	// the attempt (see judge).
	if f.owner >= 0 && f.owner < i && !time.Now().Before(f.deadline) && !bridge.BreakerMarked(err) {
		p.DoneNeutral()
	} else {
		p.Done(err)
	}
	if until := bridge.BreakerOpenUntil(c.steps[i].p); !until.IsZero() {
		// The breaker is open: a retry outside learns when it admits
		// again, and does not wait for a rejection.
		err = &bridge.OpenAfter{Err: err, Until: until}
	}
	return err
}

// runFallback runs the fallback step i.
func (c *Chain) runFallback(ctx context.Context, i int, f frame, call func(context.Context) error) error {
	if f.owner >= 0 {
		// The fallback runs within the timeouts around it: make their
		// deadline a context first, as for an opaque policy.
		return c.runCall(ctx, i, f, func(ctx context.Context) error {
			return c.fallback(ctx, i, f.fresh(), call)
		})
	}
	return c.fallback(ctx, i, f, call)
}

// runOpaque runs step i, a policy the chain does not know: it sees a real
// context, so the pending deadline becomes one first.
func (c *Chain) runOpaque(ctx context.Context, i int, f frame, call func(context.Context) error) error {
	s := &c.steps[i]
	if f.owner >= 0 {
		return c.runCall(ctx, i, f, func(ctx context.Context) error {
			return s.p.Do(ctx, func(ctx context.Context) error {
				return s.next(c, ctx, i+1, f.fresh(), call)
			})
		})
	}
	return s.p.Do(ctx, func(ctx context.Context) error {
		return s.next(c, ctx, i+1, f.fresh(), call)
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
	err := s.next(c, ctx, i+1, f, call)
	if s.fx.Covers(ctx, err) {
		return s.fx.Answer(ctx, err)
	}
	return err
}

// runCall runs call with the pending deadline, making the one context of the
// attempt, unless the caller's own deadline is as soon.
func (c *Chain) runCall(ctx context.Context, _ int, f frame, call func(context.Context) error) error {
	if f.owner < 0 {
		return call(ctx)
	}
	if f.hoisted {
		return hoistedError(ctx, c.steps[f.owner].tx.CauseOf(f.timeout), f, call(ctx))
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
// the deadline it was sent before our timer fires. (Not inlined: runCall's
// stack frame, which is on the stack while the call runs, stays small.)
//
//go:noinline
func attemptError(actx context.Context, cause error, f frame, err error) error {
	if expired(actx, cause, f, err) {
		return &timeout.Error{Timeout: f.timeout, Err: err}
	}
	return err
}

// expired reports an attempt that the fused deadline ended (see
// attemptError).
func expired(actx context.Context, cause error, f frame, err error) bool {
	return err != nil && (context.Cause(actx) == cause || actx.Err() == nil && !time.Now().Before(f.deadline))
}

// hoistedError is attemptError for an attempt whose context a hedge made
// with the deadline of the attempt timeout inside it (see hedgeStep.hoist):
// the context the breakers, throttles and limits between them admitted the
// attempt with. An attempt that timeout ended is the downstream's answer
// to them, as it is without the hedge, not their caller's end, which is
// what the end of that context would otherwise say (see internal/deadline):
// it is marked a failure (breaker.Failure), unless an adapter has already
// marked it.
//
//go:noinline
func hoistedError(actx context.Context, cause error, f frame, err error) error {
	if !expired(actx, cause, f, err) {
		return err
	}
	te := &timeout.Error{Timeout: f.timeout, Err: err}
	if bridge.BreakerMarked(err) {
		return te
	}
	return breaker.Failure(te)
}

var errPanicked = errors.New("chain: call panicked")
