// Package httpmw runs HTTP client requests through a callguard chain, as an
// http.RoundTripper:
//
//	c, _ := chain.New(retryPolicy, breaker, attemptTimeout) // the canonical order
//	client := &http.Client{Transport: httpmw.NewTransport(http.DefaultTransport, c)}
//
// It keeps the RoundTripper contract: the caller's request is never
// modified (an attempt under a context of its own, and every retry, sends a
// shallow copy, req.WithContext, with a fresh body on a retry), its body is
// always closed, and every response it discards is drained (up to a bound)
// and closed. As that contract says, base must not modify the requests it is
// given either: a base that adds headers must clone the request first.
//
// Build c in the canonical order, overall timeout → retry → breaker →
// per-attempt timeout (see package chain); the lint checks it. Attempts run
// one at a time, each response discarded before the next attempt: a policy
// of your own that runs attempts at once (hedging) gets an error for a
// second one in flight.
//
// # What is a failure
//
// Transport errors, 5xx and 429 are failures; other statuses, 4xx included,
// are answers from a healthy server and count as successes ([FailureIf]
// overrides). When retries end on a failing status, the caller gets that
// last response, as a normal response, not an error.
//
// # What is retried
//
// Only idempotent requests: GET, HEAD, OPTIONS, TRACE, PUT and DELETE, or
// any request with an Idempotency-Key or X-Idempotency-Key header, even one
// with a nil value, as net/http's own replay rule has it ([RetryAll] opts
// in to the rest). A request with a body is retried only if it has GetBody (as made by
// http.NewRequest for in-memory bodies), which replays the body byte for
// byte. Retry-After (seconds or an HTTP date) replaces the backoff wait; a
// wait past the caller's deadline ends the retries.
//
// # Timeouts and bodies
//
// An attempt timeout in the chain bounds the whole exchange, body included:
// the attempt's context is canceled when the returned body is closed, not
// when RoundTrip returns.
//
// # Per host
//
// [PerHost] keeps a chain, hence breaker state, per host, bounded in number;
// [PerKey] takes any key. [OnOpen] can answer a request the breaker rejects
// (a stale cache, a default body).
package httpmw
