package breaker

import (
	"context"
	"errors"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/internal/deadline"
)

// outcome is how one admitted call counts.
type outcome uint8

const (
	success outcome = iota
	failure
	neutral
	// slowCut is a call the caller's deadline ended after it ran longer
	// than SlowCall (native engine, closed state): a slow call, neither a
	// success nor a failure.
	slowCut
)

// classify decides how an admitted call's error counts; start is when the
// call was admitted (native engine with SlowCall, or a probe). The marks
// [Neutral] and [Failure] (the adapters' and the chain's decisions) come
// first, then a local rejection (callguard.ErrRejected: neutral), then
// the caller's own end (neutral, or slow: see cutSlow), then
// the mark [NotFailure], then the user's IsExcluded and IsFailure: a rule
// the user adds for other errors never overrides what the adapters
// marked. NotFailure yields to the caller's end: an answer that came after
// the caller left must not count as a success and break a run of failures.
func (b *Breaker) classify(ctx context.Context, g *gen, start stamp, err error) outcome {
	if err == nil {
		return success
	}
	m := markOf(err)
	switch m {
	case markNeutral:
		return neutral
	case markFailure:
		return failure
	}
	if errors.Is(err, callguard.ErrRejected) {
		return neutral // refused locally, by a throttle, a limit or a bulkhead inside the breaker
	}
	if callerDone(ctx) {
		if m == markNone && b.cutSlow(ctx, g, start) {
			return slowCut
		}
		return neutral
	}
	if m == markNotFailure {
		return success
	}
	if b.s.IsExcluded != nil && b.s.IsExcluded(err) {
		return neutral
	}
	if b.s.IsFailure != nil && !b.s.IsFailure(err) {
		return success
	}
	return failure
}

// cutSlow reports, for a call whose caller's context is done, that its
// caller's deadline ended it (not a cancellation before the deadline)
// after it had run longer than SlowCall: on the native engine with
// SlowCall set, in closed, such a call says the downstream is slow, as a
// success slower than SlowCall does.
func (b *Breaker) cutSlow(ctx context.Context, g *gen, start stamp) bool {
	if b.m == nil || !b.m.timed || g == nil || g.state != StateClosed {
		return false
	}
	if !deadline.Passed(ctx) {
		return false
	}
	if err := ctx.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return false // canceled before the deadline came
	}
	return b.m.elapsed(start, time.Now()) > b.s.SlowCall
}

// mark is how an error was marked by [Neutral], [Failure] or [NotFailure].
type mark uint8

const (
	markNone mark = iota
	markNeutral
	markFailure
	markNotFailure
)

// markOf finds the outermost mark in err's tree, depth first.
func markOf(err error) mark {
	for err != nil {
		switch e := err.(type) {
		case *neutralError:
			return markNeutral
		case *failureError:
			return markFailure
		case *notFailure:
			return markNotFailure
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				if m := markOf(inner); m != markNone {
					return m
				}
			}
			return markNone
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		default:
			return markNone
		}
	}
	return markNone
}

// NotFailure marks err as an answer from a healthy downstream, such as
// gRPC's NotFound or an HTTP 404: with the default classification the
// breaker counts it as a success. errors.Is and errors.As see through it.
// The gRPC and HTTP adapters mark caller errors this way.
func NotFailure(err error) error {
	if err == nil {
		return nil
	}
	return &notFailure{err}
}

type notFailure struct{ err error }

func (e *notFailure) Error() string { return e.err.Error() }
func (e *notFailure) Unwrap() error { return e.err }

// Neutral marks err as saying nothing of the downstream's health, such as
// an error raised on the client's side before or after the downstream did
// its part (a request over a size limit, a connection the caller closed):
// the breaker counts the call neither as a success nor as a failure, as it
// does a call the caller canceled. Errors.Is and errors.As see through it.
func Neutral(err error) error {
	if err == nil {
		return nil
	}
	return &neutralError{err}
}

type neutralError struct{ err error }

func (e *neutralError) Error() string { return e.err.Error() }
func (e *neutralError) Unwrap() error { return e.err }

// Failure marks err as a failure of the downstream, whatever the caller's
// context says: a call that was still unanswered when its caller's
// deadline ended it, after running longer than a healthy downstream takes,
// says the downstream is slow, and the chain marks it so (see package
// chain). Like the other marks, it is decided before Settings.IsExcluded
// and Settings.IsFailure. errors.Is and errors.As see through it.
func Failure(err error) error {
	if err == nil {
		return nil
	}
	return &failureError{err}
}

type failureError struct{ err error }

func (e *failureError) Error() string { return e.err.Error() }
func (e *failureError) Unwrap() error { return e.err }

// callerDone reports that the caller's context has ended, or that its
// deadline has passed and its timer is about to say so: a downstream that
// was sent the deadline may report it first.
func callerDone(ctx context.Context) bool { return deadline.Ended(ctx) }
