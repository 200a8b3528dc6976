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
// A third of the gRPC cases in a bubble dial through the per-endpoint
// load-balancing policy (grpcmw.BalancerName, put on the channel by
// grpcmw.Endpoints or EndpointHealth.DialOption): a manual resolver gives
// 2 to 4 endpoints, "ep-0", "ep-1", …, each a bufconn listener of its own
// that the one server serves, with drawn endpoint.Settings (1 to 5
// failures in a row, open stays around the case's timings, a cap of 10,
// 50 or 100 %, the slow judgement on or off); in two thirds, the first
// endpoints are sick (they answer every attempt Unavailable), and in half
// 4 to 8 calls more are made. These draws come from a source of their
// own, so that the other cases draw as before. Round robin starts at a
// random endpoint: which endpoint an attempt goes to may differ between
// runs of a seed.
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
//     Through the endpoint policy, no endpoint's breaker is open once its
//     longest stay is over, and picks made then (streams, which the chain
//     passes) readmit every endpoint: no probe is held by a call that
//     returned.
//  4. Outcomes counted match outcomes seen: a throttle, an AIMD limit or a
//     breaker that sees attempts one by one counts the failures and attempt
//     timeouts the downstream saw; the adapters' metrics count the calls
//     the callers got answers to.
//  5. Calls end: no goroutine outlives a case, no response body stays open,
//     a panic reaches the caller once the attempts it can cancel are
//     canceled, and no call outlives both its caller and its attempts.
//  6. The package runs under -race.
//  7. Ejections stay within their cap: never more endpoints ejected at
//     once than MaxEjectionPercent allows (max(1, n·pct/100) of n), as
//     OnChange tells them (tells of two endpoints at one instant may come
//     in either order: an excess counts once its instant is over); each
//     readmission follows an ejection of its endpoint, and the ejections,
//     readmissions and cappings told are those the endpoints count.
//  8. An attempt goes to an endpoint its call has not tried while one that
//     admits it is left; checked where that is decidable: every endpoint
//     connected before the calls, none ejected or capped yet, and the
//     endpoints of the call's earlier attempts known (an innermost
//     interceptor reads each attempt's peer).
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
