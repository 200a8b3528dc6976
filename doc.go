// Package callguard is a kit of client-side resilience policies — timeout,
// retry, circuit breaker, fallback — that compose into one chain and plug
// into gRPC and HTTP clients. The order of the policies is a checked
// decision: chain.New lints the chain when it is built and says, in numbers,
// what a bad order will do.
//
// The packages:
//
//   - breaker: a circuit breaker (native state machine or gobreaker/v2)
//   - retry: attempts, backoff, classification, pushback, retry budget
//   - timeout: per-attempt and overall timeouts, fixed or adaptive
//   - fallback: degraded answers when the breaker is open or a call fails
//   - hedge: another attempt beside a slow one, within a budget
//   - throttle: client-side adaptive throttling
//   - limit: adaptive concurrency limit and bulkhead
//   - chain: composition, the construction-time lint, fused timeouts
//
// The canonical order is fallback → overall timeout → retry → breaker →
// per-attempt timeout → call. The root tests (order_test.go,
// conflicts_test.go) reproduce the measurements behind each lint rule.
package callguard
