// Package timeout bounds how long a call may take: a fixed timeout, or one
// that follows the downstream's observed latency.
//
// The deadline is set with context.WithTimeoutCause, so the call's context
// reports this policy's [*Error] as its cause and callers can tell this
// timeout from their own deadline. When the caller's deadline is already
// sooner, no context is made at all. The call runs on the caller's
// goroutine: a call that ignores its context cannot be cut short, but no
// goroutine is ever left working after a timeout.
//
// A timeout that fires while the caller's context is still alive is a
// failure of the downstream (a breaker outside counts it); one that fires
// after the caller gave up is the caller's own.
//
// Tie a timeout to the downstream's tail latency: declare it with [Latency]
// so that a chain's lint can check the timeout against it, or let
// [Adaptive] follow the observed p99.9 of successful calls. Calls the
// adaptive timeout cut do not feed it: a downstream that hangs leaves it
// where it was, below the callers' deadlines, so a breaker outside still
// counts each hang as a failure.
//
// In a chain the canonical order is overall timeout → retry → breaker →
// per-attempt timeout → call: the attempt timeout inside the breaker turns a
// hung call into a failure the breaker counts. Callers' own deadlines count
// as the callers', not as failures: if every caller's deadline is at or
// below the attempt timeout, a hung downstream never trips the breaker, so
// keep the attempt timeout below the deadlines callers use.
package timeout
