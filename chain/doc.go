// Package chain composes resilience policies into one, in an order the user
// chooses, and lints that order when the chain is built.
//
// chain.New(a, b, c) makes a the outermost policy: a call goes through a,
// then b, then c, then reaches the downstream. The canonical order is
//
//	overall timeout → retry → breaker → per-attempt timeout → call
//
// with a fallback, if any, outermost, and the overload policies, when
// used, between the retry and the breaker:
//
//	retry → throttle → hedge → limit or bulkhead → breaker → per-attempt timeout
//
// (docs/ordering.md says why each goes where it does; the lint checks it). Retry outside the breaker lets the
// breaker count every attempt and the retry give up at once on
// breaker.ErrOpen; an attempt timeout inside the breaker turns a hung call
// into a failure the breaker can count, and frees a half-open probe slot.
//
// [New] checks the chain against rules that each have a stable code (see
// [Rules]) and a message that says in numbers what the order or the
// settings will do, and how to fix it. Warnings are kept in
// [Chain.Findings]; [Options.Strict] turns them into errors.
//
// A chain of callguard's own policies (breaker, retry, timeout, fallback)
// runs without building a closure or a context per policy: nested timeouts
// are fused into at most one deadline context per attempt, and none when
// the caller's deadline is already sooner. Any other [Policy] is run
// through its Do method, as an opaque step.
package chain
