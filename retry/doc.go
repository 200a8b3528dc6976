// Package retry runs a call again when it fails: a bounded number of
// attempts, waits from a cenkalti/backoff/v4 schedule, a classification of
// what is worth retrying, server pushback, and an optional budget that caps
// retries across all calls of a policy.
//
// A success costs one call and nothing else: the wait schedule and all other
// retry state are built only when an attempt fails.
//
// By default a retry gives up at once, with the error as is, on the
// caller's own cancellation, on a permanent error ([Permanent]) and on
// breaker.ErrOpen: an open breaker fails fast, and backing off against it
// only waits — unless the breaker says it may admit the next attempt by the
// end of the wait (its stay ends by then, or it is half-open with its probe
// quota used up). Before a wait, the retry also asks the breakers inside
// it (in a chain) whether the next attempt could be admitted when the wait
// ends, and gives up at once if not ([ReasonOpen]). [RetryWhenOpen] opts
// in to retrying anyway, and chain's lint flags it. When attempts run out, or the next wait would outlive the
// caller's deadline, or the budget is spent, Do returns an [*ExhaustedError]
// that unwraps to the last attempt's error.
//
// In a chain the canonical order is overall timeout → retry → breaker →
// per-attempt timeout → call: retry outside the breaker, so that the breaker
// counts every attempt and the retry stops on ErrOpen.
package retry
