// Package deadline answers, in one place, what callguard's policies ask of
// deadlines.
//
// # The caller's deadline
//
// "The caller's deadline" has one meaning: the deadline of the context the
// chain was called with (chain.Chain.Do, which the gRPC and HTTP
// adapters call with the caller's own context; a policy used on its own
// takes the context it is given as the caller's). A context a policy makes
// for its own attempts bounds those attempts and is never read as the
// caller's by another policy: an attempt timeout's, one a hedge makes with
// the deadline of the attempt timeout inside it (a hoisted timeout), one
// the chain makes of the timeouts outside a fallback, a hedge or a policy
// it does not know before running what is inside them. The chain records
// the context it was called with once, when a call enters it, and hands it
// to the policies that read the caller's deadline:
//
//   - a limit's Gradient2Settings.DeadlineShare judges a call's round trip
//     against the time its caller had left at its admission ([Left]).
//
// Other readers ask other questions, by design:
//
//   - A retry's waits, and retry.FitDeadline's plan, respect the soonest
//     deadline the retry's whole call runs under: the caller's and those
//     of the chain's timeouts around the retry. None of them is an
//     attempt's: the chain hoists no timeout past a retry.
//   - The adapters' judge of a wait in the client's own pool
//     (internal/attempt.Pooled) reads the attempt's own deadline, whoever
//     set it: the one that cut the attempt.
//   - A breaker, a throttle and a limit tell the caller's end (or that of
//     a timeout outside them) from the downstream's answer by the end of
//     the context they admitted the attempt with ([Ended]). When that
//     context is one a hedge made with the attempt timeout inside them,
//     the chain marks an attempt that timeout ended as the downstream's
//     failure (breaker.Failure) before it reports it to them, so that none
//     reads it as the caller's end.
//   - The lint's caller is chain.Options.CallerDeadline, a duration
//     declared at construction.
package deadline

import (
	"context"
	"time"
)

// Passed reports whether ctx has a deadline that is not after now.
func Passed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// Ended reports whether ctx has ended, or its deadline has passed (see
// Passed): a downstream that was sent the deadline may report it before
// the context's own timer fires, so a context whose deadline is past
// counts as ended even while ctx.Err() is still nil. A nil ctx has not
// ended.
func Ended(ctx context.Context) bool {
	return ctx != nil && (ctx.Err() != nil || Passed(ctx))
}

// Left returns the time the caller whose context is caller has left at
// now: 0 when caller is nil or has no deadline, else at least 1 ns (a
// deadline already past leaves 1 ns, which no round trip fits in).
func Left(caller context.Context, now time.Time) time.Duration {
	if caller == nil {
		return 0
	}
	if dl, ok := caller.Deadline(); ok {
		return max(dl.Sub(now), 1)
	}
	return 0
}
