// Package bridge carries hooks between callguard's own packages, so that
// what the chain, the lint and the adapters need from a policy is not
// public API (grpc-go's internal package pattern): each hook is a
// func-typed variable that the owning package sets in its init. Arguments
// typed any are the owning package's own types (a *breaker.Breaker, a
// *retry.Policy, …), asserted there; the bridge imports none of them, so
// there is no import cycle.
package bridge

import (
	"context"
	"time"
)

// Set by package breaker.
var (
	// BreakerOpenUntil returns when b, a *breaker.Breaker, admits calls
	// again: the end of its open stay, or the zero time when it admits
	// calls now (closed, half-open, or a stay that is over) or cannot tell
	// (an adapted gobreaker).
	BreakerOpenUntil func(b any) time.Time

	// BreakerWatch adds fn, a func(breaker.StateChange), to the receivers
	// of b's state changes (b a *breaker.Breaker), with key as the
	// change's Key, and returns what removes it. Receivers are called
	// after each change, with no lock held, in order, like
	// Settings.OnStateChange.
	BreakerWatch func(b any, key string, fn any) (unwatch func())

	// BreakerClean reports whether b, a *breaker.Breaker, is closed with
	// no failure counted against it now (no run of failures, none in its
	// window), without moving it on (an open stay that is over still reads
	// open) and without calling any state-change receiver: a keyed set asks
	// it under its lock, and evicts only such breakers.
	BreakerClean func(b any) bool

	// BreakerOpenRemote opens b, a native *breaker.Breaker, until until
	// (or keeps it open at least until then), for a change another
	// instance of a shared breaker made; BreakerCloseRemote closes it. A
	// forced breaker is left alone. Both report whether b changed.
	BreakerOpenRemote  func(b any, until time.Time) bool
	BreakerCloseRemote func(b any) bool
	// BreakerForgive takes back the failures b, a *breaker.Breaker,
	// counted since since, which an adaptive attempt timeout inside it
	// found to be slow answers it had cut (see Timeout.Observe): a closed
	// b's run of failures is cleared, and a b that opened since then
	// closes. Native engine only; a forced b is left alone.
	BreakerForgive func(b any, since time.Time)
	// BreakerCondemn tells b, a *breaker.Breaker, that an adaptive attempt
	// timeout inside it found the attempts it cut to be hangs, by a scout
	// that began at began: a closed b whose run of failures began by then
	// and has reached ConsecutiveFailures opens without waiting out
	// ConsecutiveFor. Native engine only.
	BreakerCondemn func(b any, began time.Time)
	// BreakerTrip opens a closed b as its own rules would, its open stay
	// growing with MaxOpenTimeout, and returns when it admits calls again
	// (zero if it did not open it).
	BreakerTrip func(b any) time.Time

	// BreakerMarked reports whether err carries one of the breaker's
	// marks (Neutral, Failure, NotFailure): an adapter or the chain has
	// already decided how it counts.
	BreakerMarked func(err error) bool
	// BreakerNotFailure reports whether err carries the mark NotFailure
	// (an answer of the downstream that says nothing against its health,
	// such as a caller's error): the throttle counts it accepted.
	BreakerNotFailure func(err error) bool
	// BreakerFailure reports whether err carries the mark Failure: the
	// chain judged the attempt a failure of the downstream even though a
	// context ended it (a timeout inside a hedge, or an attempt cut after
	// it had run longer than a healthy downstream takes). A throttle or a
	// limit counts it as the downstream's answer, not as the caller's end.
	BreakerFailure func(err error) bool
)

// Set by package shared (a module of its own: nil without it).
var (
	// BreakerRetired is told of b, a *breaker.Breaker, whose chain a
	// keyed set evicted: its sharing through Redis ends. It must not
	// block (the evicting call is a caller's).
	BreakerRetired func(b any)
)

// Set by package retry.
var (
	// RetryBudget returns the budget of p, a *retry.Policy: its ratio of
	// retries per call, its retries per second and its starting tokens
	// (ok false without a budget).
	RetryBudget func(p any) (ratio, perSecond, burst float64, ok bool)
	// ThrottleOwn makes t, a *retry.Throttle not yet in use, credited by
	// its owner only, with the func it returns, and no longer by the
	// retries given it: grpc-go credits its connection's throttle with
	// every successful RPC, whatever the method and its retry.
	ThrottleOwn func(t any) (credit func())
)

// Set by package limit.
var (
	// LimitAcquire is, for a *limit.Limiter,
	//
	//	func(l *limit.Limiter, ctx, caller context.Context) (limit.Permit, error)
	//
	// Acquire for an attempt that waits and ends with ctx, whose caller's
	// deadline (see internal/deadline) is that of caller, the context the
	// chain was called with. Its users assert it to that type once, at
	// initialization.
	LimitAcquire any
)

// Set by package timeout.
var (
	// TimeoutPatience returns, for t a *timeout.Policy, how long a healthy
	// downstream may take to answer: the latency of the highest quantile
	// declared with Latency; for an adaptive timeout, the quantile it
	// follows (its current value over its Multiplier); otherwise half the
	// timeout. An attempt that a deadline other than t's ended after it
	// ran this long counts as a failure of the downstream.
	TimeoutPatience func(t any) time.Duration
)

// Set by package chain.
var (
	// ChainDoDeferred runs call through c, a *chain.Chain, like
	// ChainDoHolding, except that a breaker whose attempt succeeded hands its
	// permit to set, a *deferred.Set, instead of reporting the success: the
	// adapter reports the call's final outcome to them later (an HTTP
	// response body read in full, or failing mid-read).
	ChainDoDeferred func(c any, ctx context.Context, set any, call func(context.Context) error) error
)

// OpenAfter is a failed attempt's error, wrapped by the chain (or a stream)
// after a breaker that counted it was left open: the next attempt cannot
// be admitted before Until. A retry outside reads it before it waits: it
// gives up at once rather than wait for a rejection (or, retrying when
// open, waits until Until). errors.Is and errors.As see through it.
type OpenAfter struct {
	Err   error
	Until time.Time // the first instant the breaker admits a call again
}

func (e *OpenAfter) Error() string { return e.Err.Error() }
func (e *OpenAfter) Unwrap() error { return e.Err }
