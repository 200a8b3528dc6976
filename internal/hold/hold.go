// Package hold lets a call keep the attempt context a chain made for it
// alive after it returns, for results used later, such as an HTTP response
// body read after RoundTrip: the chain cancels the context of an attempt
// (the fused deadline of its timeouts) when the call returns, unless the
// call holds it.
package hold

import (
	"context"
	"sync"
)

// holdKey marks a context from [WithHolder]; attemptKey finds the attempt
// record of an attempt context.
type (
	holdKey    struct{}
	attemptKey struct{}
)

// WithHolder returns ctx marked so that the calls a chain's Do runs under it
// can keep their attempt contexts alive after they return, with [Hold]:
// for results used later, such as an HTTP response body read after
// RoundTrip. Without the mark, the chain cancels the context it made for
// an attempt (the fused deadline of its timeouts) as soon as the call
// returns. Under it, each attempt context carries a record of its own (one
// allocation per attempt), so attempts may run one after another or at
// once (under a hedging policy of your own), and nested chains nest.
func WithHolder(ctx context.Context) context.Context {
	return context.WithValue(ctx, holdKey{}, true)
}

// Hold keeps the attempt context that ctx is, or is derived from, from being
// canceled when the call returns: a call that runs under a context from
// [WithHolder] calls it with the context it was given, and must call
// [Held.Release] once the result is done with. Calls sharing one attempt
// context (under a hedging policy of your own, or a retry inside an opaque
// policy inside a timeout) may each hold it: it lives until every hold is
// released. Without an attempt context to hold (no timeout, or no
// [WithHolder]) it returns nil, whose Release does nothing.
func Hold(ctx context.Context) *Held {
	a, _ := ctx.Value(attemptKey{}).(*Attempt)
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held++
	if a.held == 1 {
		for p := a.parent; p != nil; p = p.parent {
			p.holds++
		}
	}
	if !a.first.used { // the first hold costs no allocation
		a.first = Held{a: a, used: true}
		return &a.first
	}
	return &Held{a: a, used: true}
}

// Held is one hold, by [Hold], on an attempt context.
type Held struct {
	a        *Attempt
	used     bool // given out by Hold
	released bool // under a.mu
}

// Release gives this hold back: the attempt context is canceled once its
// call has returned and no hold is left, and then the attempt contexts of
// the chains around it, on the same terms. It is safe to call more than
// once, from any goroutine, and on nil.
func (h *Held) Release() {
	if h == nil {
		return
	}
	a := h.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if h.released {
		return
	}
	h.released = true
	a.held--
	a.maybeCancel()
	if a.held == 0 {
		for p := a.parent; p != nil; p = p.parent {
			p.holds--
			p.maybeCancel()
		}
	}
}

// Attempt is an attempt context made under [WithHolder], with what decides
// when it is canceled: once its call has returned (done), unless a hold on
// it (held) or on an attempt nested in it (holds) is not yet released.
type Attempt struct {
	context.Context // the attempt's own, from context.WithDeadlineCause
	cancel          context.CancelFunc
	parent          *Attempt    // the attempt context this one was made under
	mu              *sync.Mutex // shared by an outermost attempt and those nested in it
	own             sync.Mutex  // mu, for an outermost attempt
	first           Held        // the first hold on it

	held     int  // holds on it not yet released
	holds    int  // attempts nested in it that are held
	done     bool // its call has returned
	canceled bool
}

// NewAttempt wraps the attempt context actx made under ctx.
func NewAttempt(ctx, actx context.Context, cancel context.CancelFunc) *Attempt {
	a := &Attempt{Context: actx, cancel: cancel}
	a.parent, _ = ctx.Value(attemptKey{}).(*Attempt)
	a.mu = &a.own
	if a.parent != nil {
		a.mu = a.parent.mu
	}
	return a
}

// Value finds the attempt record; other keys go to the attempt context, so
// that contexts derived from it register with it as with any
// context.WithDeadline.
func (a *Attempt) Value(key any) any {
	if key == (attemptKey{}) {
		return a
	}
	return a.Context.Value(key)
}

// Finish records that the attempt's call has returned, canceling its
// context unless it is held. The chain defers it, so a panic cancels too.
func (a *Attempt) Finish() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.done = true
	a.maybeCancel()
}

// maybeCancel cancels the attempt context once nothing keeps it; a.mu held.
func (a *Attempt) maybeCancel() {
	if a.done && a.held == 0 && a.holds == 0 && !a.canceled {
		a.canceled = true
		a.cancel()
	}
}

// Holdable reports whether ctx comes from WithHolder.
func Holdable(ctx context.Context) bool {
	return ctx.Value(holdKey{}) != nil
}
