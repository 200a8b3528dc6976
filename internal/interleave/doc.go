// Package interleave is a property-based test of callguard's policies, as
// they interleave: random chains, run three ways, against a downstream
// whose answers and timings are random, with the invariants below checked
// on every case.
//
// # Cases
//
// A case is a seed. From a math/rand/v2 source seeded with it, a case draws
// a chain of 1 to 6 policies of every kind (retry, breaker, timeout,
// fallback, hedge, throttle, limit with AIMD or Gradient2, bulkhead, and a
// user's own policy: one that runs a nested chain, one that runs two
// attempts at once, one that panics), in the canonical order or not, built
// with chain.New (strict or not: a chain it refuses is drawn again) or, for
// a quarter of the chains a file can say, written as a spec file and
// built by package spec (a file refused for more than its lint fails the
// run); how
// to run it (chain.Do, httpmw over an http.Client, grpcmw over a gRPC
// connection); whether the request is idempotent; 1 to 4 calls, at once or
// one after another, with caller deadlines and cancellations; and, for each
// attempt, the downstream's answer (a success naming the attempt in its
// body, header and trailer; 503/Unavailable; 429/ResourceExhausted with a
// pushback; 400/InvalidArgument; a hang until canceled; a panic) after a
// delay drawn just below, at and just above the chain's timeouts and hedge
// delays, sometimes deaf to cancellation. Callbacks (a breaker's
// OnStateChange, a retry's OnRetry, a fallback) panic in some cases.
//
// Cases run in testing/synctest bubbles (gRPC over bufconn, HTTP with an
// in-process base RoundTripper), so a seed replays the same virtual
// timings; a bounded few run over real loopback sockets.
//
// # Invariants
//
//  1. An attempt that succeeded at the downstream while its caller waited
//     makes the call a success; every success the caller gets has the body,
//     header and trailer of one attempt that succeeded (or a fallback's).
//  2. A request that is not idempotent reaches the downstream at most once.
//  3. Every permit is given back: limits and bulkheads have nothing in
//     flight or queued once the calls returned; each breaker admits a probe
//     once its stay is over; a hedge stays within its budget, and, where it
//     can be known, counts as many hedges as the downstream received.
//  4. Outcomes counted match outcomes seen: a throttle, an AIMD limit or a
//     breaker that sees attempts one by one counts the failures and attempt
//     timeouts the downstream saw; the adapters' metrics count the calls
//     the callers got answers to.
//  5. Calls end: no goroutine outlives a case, no response body stays open,
//     a panic reaches the caller once the attempts it can cancel are
//     canceled, and no call outlives both its caller and its attempts.
//  6. The package runs under -race.
//
// A case that breaks one fails the test with its seed, a line describing
// it, the invariants broken and the command that runs it alone.
//
// # Flags
//
//	-interleave.seed=N      run only the case of seed N (with -v: its story)
//	-interleave.cases=N     run N cases (default 3000; a fifth with -short)
//	-interleave.duration=D  run cases for D
//	-interleave.base=B      draw seeds B<<32 | n instead of n
//	-interleave.loopback    run 1 case in 125 over loopback sockets (default true)
//	-interleave.v           log every case
//
// For example:
//
//	go test ./internal/interleave -run 'TestInterleave$' -interleave.seed=42 -v
//	go test -race ./internal/interleave -interleave.duration=10m
//
// Seeds that found defects are kept in the regressions table and run on
// every go test.
package interleave
