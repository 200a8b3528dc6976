package bridge

import (
	"context"
	"time"
)

// Timeout is what the chain, its lint and the adapters know of a
// *timeout.Policy beyond its public API. The policy keeps one, made by
// timeout.New and never changed after; TimeoutOf returns it.
type Timeout struct {
	D     time.Duration // the fixed timeout, or an adaptive one's start
	Cause error         // the cause (context.Cause) of a context D ended: a *timeout.Error

	// NewCause returns the cause for another timeout d (an adaptive
	// timeout's value at the time).
	NewCause func(d time.Duration) error

	Adaptive bool
	Current  func() time.Duration // adaptive: the timeout now
	// Start returns the timeout of an attempt starting now under ctx:
	// Current, or, for an attempt that is one of the adaptive timeout's
	// scouts, its ceiling (scout true: see timeout/scout.go). Only an
	// attempt that will run calls it: it claims a scout.
	Start func(ctx context.Context) (d time.Duration, scout bool)
	// Observe feeds the adaptive timeout an attempt that started at start
	// and ended with err (fired: this timeout ended it, or, for a scout,
	// its ceiling or its caller's deadline did; scout: Start said so), and
	// returns what a scout's end says of the attempts the timeout
	// cut (see Verdict; the zero Verdict for any other attempt).
	Observe  func(start time.Time, err error, fired, scout bool) Verdict
	Min, Max time.Duration // adaptive: its bounds

	// Declared are the quantiles given with timeout.Latency, by
	// increasing Q.
	Declared []Quantile
}

// Verdict is what the end of an adaptive timeout's scout says of the
// attempts it cut while in doubt.
type Verdict struct {
	// Forgive, if not zero: the scout answered later than the timeout, so
	// the attempts cut since Forgive were slow answers, not hangs: the
	// breakers outside forgive the failures they counted
	// (BreakerForgive).
	Forgive time.Time
	// Hung, if not zero, is when the scout that did not answer by its
	// ceiling began, while the timeout cut nearly every attempt (a storm):
	// the downstream hangs, and a breaker outside whose run of failures
	// began by then opens on it without waiting out its ConsecutiveFor
	// (BreakerCondemn).
	Hung time.Time
}

// Quantile is a declared point of the healthy latency distribution.
type Quantile struct {
	Q       float64
	Latency time.Duration
}

// Deadline returns the deadline of an attempt starting at now, the
// timeout behind it, and whether the attempt is the adaptive timeout's
// scout (see Start): call it only for an attempt that will run.
func (t *Timeout) Deadline(ctx context.Context, now time.Time) (time.Time, time.Duration, bool) {
	if !t.Adaptive {
		return now.Add(t.D), t.D, false
	}
	d, scout := t.Start(ctx)
	return now.Add(d), d, scout
}

// Planned returns the timeout an attempt starting now would have, without
// claiming the scout: for planning (a retry's reserve).
func (t *Timeout) Planned() time.Duration {
	if t.Adaptive {
		return t.Current()
	}
	return t.D
}

// CauseOf returns the cause of a context this policy ended after d.
func (t *Timeout) CauseOf(d time.Duration) error {
	if d == t.D && t.Cause != nil {
		return t.Cause
	}
	return t.NewCause(d)
}

// Longest returns the longest timeout the policy may set: the fixed one,
// or an adaptive one's Max.
func (t *Timeout) Longest() time.Duration {
	if t.Adaptive {
		return t.Max
	}
	return t.D
}

// Retry is what the chain, its lint and the adapters know of a
// *retry.Policy beyond its public API.
type Retry struct {
	// DoUntil is Do with a deadline that the waits must respect besides
	// ctx's own (a chain's pending timeout, not yet a context): a wait
	// that would end past it ends the retries instead.
	//
	// reserve is the time the next attempt is planned to take (the attempt
	// timeout inside the retry, 0: none known); a policy made with
	// FitDeadline shortens a wait that would leave less than it before the
	// deadline.
	DoUntil func(ctx context.Context, deadline time.Time, reserve time.Duration, call func(context.Context) error) error
	// Continue retries a call whose first attempt was made outside the
	// policy and failed with err; a nil err is returned at once. A chain
	// makes the first attempt itself, after Deposit, so that the success
	// path passes no function to the retry (which, through a func value,
	// would escape to the heap); a stream's first attempt is its creation.
	// Deposit, then the first call, then Continue (Succeeded on a
	// success), is DoUntil.
	Continue func(ctx context.Context, deadline time.Time, reserve time.Duration, err error, call func(context.Context) error) error
	// Fit: the policy plans its waits against the deadline (FitDeadline),
	// so the chain passes it the reserve.
	Fit bool
	// Deposit credits the retry budget with a new call (nil without a
	// budget).
	Deposit func()
	// Succeeded credits the retry throttle with a call that succeeded at
	// its first attempt, made outside the policy (nil without a throttle):
	// Deposit, the first call, then Succeeded on success, or Continue on
	// failure, is DoUntil.
	Succeeded func()
	// Waits returns the nominal waits between attempts (without jitter
	// or pushback).
	Waits    func() []time.Duration
	Attempts int // counting the first call
	// Retries returns the retries made since the policy was made, and the
	// calls it gave up on, by reason ("attempts_exhausted", …: the
	// callguard.reason values of callguard.retry.exhausted).
	Retries func() (retries uint64, exhausted map[string]uint64)
	// BudgetTokens returns the retry budget's tokens now (ok false without
	// a budget).
	BudgetTokens func() (tokens float64, ok bool)
	// WhenOpen: the policy retries when a breaker rejects an attempt
	// (retry.RetryWhenOpen).
	WhenOpen bool
}

// Fallback is what the chain and its lint know of a *fallback.Policy.
type Fallback struct {
	// Covers reports whether err, returned to a caller whose context is
	// ctx, goes to the fallback.
	Covers func(ctx context.Context, err error) bool
	// Answer calls the fallback function for err.
	Answer func(ctx context.Context, err error) error
	// OnlyOpen: the fallback covers breaker.ErrOpen alone (the default).
	OnlyOpen bool
}

// Set by packages timeout, retry and fallback: what they keep for p, a
// *timeout.Policy, a *retry.Policy or a *fallback.Policy (never nil; a
// zero policy gives one that does nothing).
var (
	TimeoutOf  func(p any) *Timeout
	RetryOf    func(p any) *Retry
	FallbackOf func(p any) *Fallback
)

// Set by package chain.
var (
	// ChainDoHolding runs call through c, a *chain.Chain, allowing the
	// call to keep its attempt context alive after it returns (see
	// package hold).
	ChainDoHolding func(c any, ctx context.Context, call func(context.Context) error) error
	// ChainVerdict tells the breakers outside step i of c, a *chain.Chain,
	// what the verdict v of its adaptive timeout's scout says (see
	// Verdict), for an observation an adapter reported after the call
	// returned (package deferred).
	ChainVerdict func(c any, i int, v Verdict)
	// ChainNeedsHolder reports whether c, a *chain.Chain, may make
	// attempt contexts that hold.Hold can keep: it has a timeout, or a
	// policy it does not know that may have one.
	ChainNeedsHolder func(c any) bool
)

// HedgeRunner runs the attempts of a hedged call.
type HedgeRunner interface {
	// HedgeContext makes the context of an attempt under ctx, and what
	// cancels it: context.WithCancel, or, in a chain whose attempt
	// timeout lies just inside the hedge, the attempt context that timeout
	// would make.
	HedgeContext(ctx context.Context) (context.Context, context.CancelFunc)
	// HedgeAttempt runs one attempt with a context from HedgeContext.
	HedgeAttempt(ctx context.Context) error
}

// HedgeCall is a hedged call in progress, from [Hedge.Start].
type HedgeCall interface {
	// Finish takes the error of the first attempt, which the caller ran
	// itself, and returns the call's: nil if any attempt succeeded, else
	// the error of the attempt that ended last (a hedge refused before it
	// was sent aside). It returns once every attempt it started has ended.
	Finish(err error) error
	// Abort ends the call when the first attempt panicked: the hedges are
	// canceled and waited for.
	Abort()
}

// Hedge is what the chain, its lint and the adapters know of a
// *hedge.Policy.
type Hedge struct {
	// Start begins a hedged call under ctx. It returns the context the
	// caller runs the first attempt with, on its own goroutine, and the
	// call, whose Finish it then calls with that attempt's error. Hedges
	// start on a timer and run r.HedgeAttempt on goroutines of their own;
	// the first success cancels the others. Under a context marked
	// [NoHedge], it returns ctx and a nil call: run the attempt alone.
	Start     func(ctx context.Context, r HedgeRunner) (context.Context, HedgeCall)
	MaxHedges int
	Delay     func() time.Duration // now
	Quantile  float64              // the latency quantile the delay follows (0: fixed)
	Budget    float64              // hedges per call at most
}

// lastAttempt marks the context of a retry's last attempt.
type lastAttempt struct{}

// WithLastAttempt marks ctx as that of a retry's last attempt: no retry
// follows it, so an adaptive timeout in doubt lets it run to its ceiling
// (see Timeout.Start). It allocates: a retry calls it on its failure path
// only.
func WithLastAttempt(ctx context.Context) context.Context {
	return context.WithValue(ctx, lastAttempt{}, true)
}

// IsLastAttempt reports whether ctx is, or is derived from, the context of
// a retry's last attempt.
func IsLastAttempt(ctx context.Context) bool { return ctx != nil && ctx.Value(lastAttempt{}) != nil }

// NotSent is the error of an attempt that ended before it was sent, for a
// reason that is not a refusal (callguard.ErrRejected): its context ended
// while it waited for admission (a limit's or a bulkhead's queue). A hedge
// gives such an attempt's token back. It unwraps to the context's error.
type NotSent struct{ Err error }

func (e *NotSent) Error() string { return e.Err.Error() }
func (e *NotSent) Unwrap() error { return e.Err }

// NoHedge marks a context whose call must not be hedged (a call that is
// not idempotent, in an adapter).
type NoHedge struct{}

// HedgeOf is set by package hedge: what it keeps for p, a *hedge.Policy.
var HedgeOf func(p any) *Hedge
