// Package breaker is a circuit breaker: closed, open and half-open, with trip
// rules on consecutive failures, a failure rate and a slow-call rate over a
// sliding window of time or of calls.
//
// A [Breaker] runs on callguard's native state machine or, with
// [EngineGobreaker], on github.com/sony/gobreaker/v2; with the same settings
// both go through the same transitions at the same instants. The native
// machine adds what gobreaker cannot do: closing on k successes among n
// probes ([Settings.HalfOpenSuccesses]), an open stay that grows on repeated
// trips ([Settings.MaxOpenTimeout]), count windows and slow-call rates,
// state-change callbacks called with no lock held, and a closed-state success
// path that takes no lock and allocates nothing.
//
// # States
//
// Closed lets every call through and counts outcomes; when a trip rule fires
// the breaker opens. Open rejects every call for [Settings.OpenTimeout]
// with an [*OpenError] that names the breaker and says when it admits calls
// again; errors.Is(err, [ErrOpen]) holds for every rejection. The first
// call after that finds the breaker half-open: it admits
// [Settings.HalfOpenProbes] probe calls and rejects the rest (the error
// also matches [ErrTooManyProbes]). It closes after
// [Settings.HalfOpenSuccesses] successful probes and re-opens as soon as a
// failure makes that number unreachable. Nothing runs in the background: a
// state whose time is up changes on the next call or [Breaker.State].
//
// # Outcomes
//
// A call's error is a success, a failure, or neutral; the first rule that
// applies decides: nil is a success; an error marked with [Neutral] is
// neutral and one marked with [Failure] a failure (the outermost mark);
// an error returned after the caller's own context was done is neutral
// (or slow: see [Settings.SlowCall]); one marked with [NotFailure] is a
// success; then [Settings.IsExcluded] (neutral) and [Settings.IsFailure]
// (false: a success) decide, and any other error is a failure. Neutral
// calls count toward nothing, and a neutral probe gives its half-open slot
// back.
//
// # Where it goes in a chain
//
// The canonical order is overall timeout → retry → breaker → per-attempt
// timeout → call: retry outside the breaker so that the breaker counts every
// attempt and a retry gives up at once on [ErrOpen]; an attempt timeout
// inside it so that a hung call cannot hold a half-open probe slot forever.
// Time comes only from the standard library (time.Now), so tests can run a
// breaker in virtual time with testing/synctest.
package breaker
