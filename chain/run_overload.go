package chain

import (
	"context"
	"errors"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/internal/hold"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/throttle"
)

// runHedge runs the hedge step i: the first attempt on the caller's
// goroutine, hedges on their own (see package hedge). Each attempt runs
// what is inside the step with a context of its own, which the hedge
// cancels when another wins: pending deadlines become a context first, as
// for an opaque policy.
func (c *Chain) runHedge(ctx context.Context, i int, f frame, call func(context.Context) error) error {
	if f.owner >= 0 {
		return c.runCall(ctx, i, f, func(ctx context.Context) error {
			return c.hedge(ctx, i, f.fresh(), call)
		})
	}
	return c.hedge(ctx, i, f, call)
}

// hedgeRunner runs one attempt of a hedged call: what is inside step i.
type hedgeRunner struct {
	c    *Chain
	i    int
	f    frame
	call func(context.Context) error
}

// HedgeContext makes an attempt's context: the one its attempt timeout
// would make, when the hedge step hoists it (see hedgeStep.hoist), else a
// cancelable one.
func (r *hedgeRunner) HedgeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	s := &r.c.steps[r.i]
	if s.h.hoist < 0 {
		return context.WithCancel(ctx)
	}
	t := r.c.steps[s.h.hoist].tx
	return context.WithDeadlineCause(ctx, time.Now().Add(t.D), t.Cause)
}

func (r *hedgeRunner) HedgeAttempt(ctx context.Context) error {
	return r.c.steps[r.i].next(r.c, ctx, r.i+1, r.f, r.call)
}

func (c *Chain) hedge(ctx context.Context, i int, f frame, call func(context.Context) error) error {
	s := &c.steps[i]
	if f.hold && !hold.Holdable(ctx) {
		// The winner's context must outlive the call, as a held attempt
		// context does: the hedge makes its attempts' contexts holdable.
		ctx = hold.WithHolder(ctx)
	}
	r, _ := s.h.hr.Get().(*hedgeRunner)
	if r == nil {
		r = new(hedgeRunner)
	}
	hf := f
	hf.hoisted = s.h.hoist >= 0
	*r = hedgeRunner{c: c, i: i, f: hf, call: call}
	actx, h := s.h.hx.Start(ctx, r)
	if h == nil {
		// Not hedged (a call that is not idempotent): no attempt context
		// was made here, the timeouts inside make theirs.
		*r = hedgeRunner{}
		s.h.hr.Put(r)
		return s.next(c, actx, i+1, f, call)
	}
	err := c.hedged(actx, i, hf, call, h)
	*r = hedgeRunner{}
	s.h.hr.Put(r)
	return err
}

// hedged runs the first attempt of the hedged call h and finishes it; if
// the attempt panics, the hedges are canceled and waited for first.
func (c *Chain) hedged(ctx context.Context, i int, f frame, call func(context.Context) error, h bridge.HedgeCall) error {
	finished := false
	defer func() {
		if !finished {
			h.Abort()
		}
	}()
	err := c.steps[i].next(c, ctx, i+1, f, call)
	finished = true
	return h.Finish(err)
}

// runThrottle runs the throttle step i.
func (c *Chain) runThrottle(ctx context.Context, i int, f frame, call func(context.Context) error) error {
	p, err := c.steps[i].p.(*throttle.Throttle).Allow(ctx)
	if err != nil {
		return err
	}
	return gated(c, ctx, i, f, call, p)
}

// limitAcquire is Acquire for an attempt that waits and ends with ctx,
// of a call whose caller's context is caller (see bridge.LimitAcquire).
var limitAcquire = bridge.LimitAcquire.(func(l *limit.Limiter, ctx, caller context.Context) (limit.Permit, error))

// runLimit runs the limiter or bulkhead step i: a limiter reads the
// caller's deadline from the context the chain was called with, not from
// ctx, which may be one a policy outside it made for its attempts.
func (c *Chain) runLimit(ctx context.Context, i int, f frame, call func(context.Context) error) error {
	var p limit.Permit
	var err error
	switch l := c.steps[i].p.(type) {
	case *limit.Limiter:
		p, err = limitAcquire(l, ctx, f.caller)
	case *limit.Bulkhead:
		p, err = l.Acquire(ctx)
	}
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, callguard.ErrRejected) {
			// The context ended while the call waited for a slot: it was
			// never sent (a hedge canceled in the queue gets its token back).
			err = &bridge.NotSent{Err: err}
		}
		return err
	}
	return gated(c, ctx, i, f, call, p)
}

// gated runs what is inside step i under the permit p of its throttle,
// limiter or bulkhead, and reports how it ended: neutral if a timeout
// outside the step ended it (see outerCut) or it panicked (the slot is
// given back, the panic goes on).
func gated[P interface {
	Done(error)
	DoneNeutral()
}](c *Chain, ctx context.Context, i int, f frame, call func(context.Context) error, p P) error {
	finished := false
	defer func() {
		if !finished {
			p.DoneNeutral()
		}
	}()
	err := c.steps[i].next(c, ctx, i+1, f, call)
	finished = true
	if outerCut(i, f, err) {
		p.DoneNeutral()
	} else {
		p.Done(err)
	}
	return err
}

// outerCut reports an attempt of step i that a timeout outside the step
// ended: the caller's deadline, as far as the step is concerned (as for a
// breaker; see breakerFailed).
func outerCut(i int, f frame, err error) bool {
	return err != nil && f.owner >= 0 && f.owner < i && !time.Now().Before(f.deadline) && !bridge.BreakerMarked(err)
}
