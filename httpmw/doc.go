// Package httpmw runs HTTP client requests through a callguard chain, as an
// http.RoundTripper:
//
//	c, _ := chain.New(retryPolicy, breaker, attemptTimeout) // the canonical order
//	tr, err := httpmw.New(http.DefaultTransport, c)
//	if err != nil {
//		return err // an invalid option, by name
//	}
//	client := &http.Client{Transport: tr}
//
// [New] checks c and every option once, and returns the first error, by
// name; no request ever fails for a bad option.
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
// one at a time, except under a hedge (package hedge, or a policy of your
// own that runs attempts at once): then the attempts of a request that may
// be retried (an idempotent method or an Idempotency-Key, a body GetBody
// can replay) run at once, each with its own copy of the body. The first
// success is the answer, whenever the others end: an attempt that would
// start after it is refused before it is sent, an answer that comes after
// it is drained and closed; a failure is the answer only while no attempt
// has succeeded (the latest failure). Another request is never sent twice
// at once: a second attempt in flight is refused before it is sent. A
// failing answer that may be retried is read into memory (up to
// [DrainUpTo]) and its connection released at once. Through an
// *http.Transport with MaxConnsPerHost (or an [Endpoints] over one), an
// attempt its deadline cut before it had half its time on the server's
// side is the client's wait, neutral to breakers: waiting for a
// connection of the pool that exists (every slot held by a connection in
// use) is the client's time; making one (a dial, a TLS handshake, a host
// that drops SYNs: the time no connection to the host is in use) and the
// time with it are the server's, so that an unreachable host opens a
// breaker. Connections held by requests that reach the base without a
// Transport of this package are not seen.
// docs/attempts.md states the invariants.
//
// A rejection before any attempt was sent — a breaker open
// (breaker.ErrOpen), or a throttle, a limiter or a bulkhead refusing the
// request (callguard.ErrRejected) — is an error from RoundTrip, one shape
// for both: nothing reached the server, and a synthetic 503 would look
// like the downstream's own to a retry layer or a proxy above.
// [RejectionResponses] answers both with a 503 marked [RejectedHeader]
// instead; [OnOpen] answers a breaker's rejection in a way of its own. A
// rejection after an attempt was sent (a retry refused) gives the caller
// that attempt's response.
//
// # What is a failure
//
// Transport errors, 5xx and 429 are failures; other statuses, 4xx included,
// are answers from a healthy server and count as successes ([FailureIf]
// overrides). A 429 is retried only when it says when (Retry-After), as
// grpcmw retries a ResourceExhausted only with a pushback. A body that fails mid-read is a failure too
// ([CountBodyErrors]). What the client causes itself (a body it cannot
// replay, a second attempt at once) is neutral. The caller's cancellation
// is neutral; an attempt its deadline (http.Client.Timeout) ended counts as
// a failure if it had already run longer than a healthy answer takes (see
// package chain). When retries end on a failing status, the caller gets
// that last response, as a normal response, not an error; if a breaker
// ended them, the response carries [BreakerHeader].
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
// when RoundTrip returns. A 101 Switching Protocols response passes through
// unchanged, its body the connection. A discarded body is drained for at
// most [DrainUpTo] bytes and [DrainTimeout].
//
// # Per host
//
// [PerHost] keeps a chain, hence breaker state, per host, bounded in number;
// [PerKey] takes any key; [OnStateChange] and [Transport.Breakers] say which
// breaker is in which state. A fallback in the chain answers a failed
// request with [Respond]; [OnOpen] answers only requests the breaker
// rejected before any attempt.
//
// # Per address
//
// [Endpoints], the base of a Transport, spreads each host's requests over
// the addresses the host resolves to, with a breaker per address (package
// endpoint): one bad backend behind a name is ejected (never more than a
// share of them at once) and probed back, while the chain's breaker goes
// on judging the whole host; a retry or a hedge goes to an address the
// request's earlier attempts did not try.
//
//	eps, err := httpmw.NewEndpoints(nil, endpoint.Settings{})
//	tr, err := httpmw.Standard(eps, preset.Settings{})
package httpmw
