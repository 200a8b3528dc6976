// Package throttle is client-side adaptive throttling, as described in the
// Google SRE book, "Handling Overload" (chapter 21): a client that sees its
// downstream refuse more and more of its calls starts refusing a fraction
// of them itself, locally, so that an overloaded downstream does not spend
// its capacity refusing requests.
//
// # The algorithm
//
// A [Throttle] counts, over a sliding [Settings.Window]:
//
//   - requests: every call the application attempted, including those the
//     throttle rejected itself;
//   - accepts: the calls the downstream accepted (see below).
//
// It rejects each new call, before counting it, with probability
//
//	p = max(0, (requests − K·accepts) / (requests + 1))
//
// capped at [Settings.MaxRejectionRate], and 0 while the window holds fewer
// than [Settings.MinRequests] requests. Nothing is rejected while at least
// 1 request in K is accepted. Because rejected calls count as requests and
// never as accepts, p keeps rising while the downstream refuses; once it
// accepts again, the calls still admitted bring accepts back and p falls.
// [Throttle.RejectionRate] reports p now. A rejection returns a
// [*RejectedError] with p and the counts behind it, matching [ErrThrottled]
// and callguard.ErrRejected.
//
// The window is a ring of 10 buckets of time (exact to a tenth of the
// window), each count one atomic word rolled lazily: no goroutine, no
// lock, and no allocation to admit a call and record its outcome. The
// random draw is math/rand/v2's Float64, which is safe for concurrent use
// and takes no lock. Time comes only from the standard library, so tests
// can run a throttle in virtual time with testing/synctest.
//
// # What counts as accepted
//
// [Permit.Done] (and [Throttle.Do]) classify the call's error, the first
// rule that applies deciding: a nil error is accepted; an error returned
// after the caller's own context ended (or its deadline passed), or one
// matching callguard.ErrRejected (another local policy refused the call),
// is neutral; [Settings.IsAccepted] decides any other error; without it,
// every other error is a refusal. A neutral call takes its request back,
// as [Permit.DoneNeutral] does: a caller's own cancellation must push p
// neither up (as a refusal would, throttling healthy downstreams whose
// callers are impatient) nor down (as an accept would, hiding an
// overload). A call that panics is a refusal.
//
// The default treats every error from the downstream as a refusal, except
// those the gRPC and HTTP adapters mark breaker.NotFailure (an answer such
// as InvalidArgument or 404: the downstream accepted and did the work);
// ResourceExhausted, Unavailable or 503 are refusals. IsAccepted decides
// the rest. A breaker's breaker.ErrOpen from inside the throttle is
// neutral, like a local rejection: the call never reached the downstream,
// and counted as a refusal it would keep the throttle shedding for a
// window after the breaker closed.
//
// # Defaults, and where they differ from failsafe-go
//
// The reference peer is failsafe-go's adaptivethrottler (v0.9.8).
//
//   - K = 2, the SRE book's value: rejection starts below a 50 % accept
//     rate. failsafe-go expresses K as a failure-rate threshold (default
//     0.1, i.e. K = 1/0.9 ≈ 1.11): it throttles as soon as more than 10 %
//     of calls fail, which sheds load on errors that are not overload. The
//     book's K = 2 lets a downstream refuse up to half the calls before
//     the client sheds any, and spends at most one request in K on a
//     downstream that refuses them.
//   - Window = 1 minute, as failsafe-go (the book uses 2 minutes). The
//     throttle recovers after an outage in about 1.7 windows (measured:
//     1 min 43 s at 100 calls/s with the default cap; 3 min 28 s with a
//     2-minute window), since at the cap only 1 call in 10 can bring an
//     accept back; a minute keeps that under two minutes while holding
//     enough requests to be meaningful at 1 call a second.
//   - MaxRejectionRate = 0.9, as failsafe-go. The formula itself stays
//     below 1 but approaches it (1000 refusals give 0.999); the cap keeps
//     1 call in 10 going to the downstream so that accepts can return, and
//     bounds recovery: with a cap of 0.99 it takes about twice as long.
//   - MinRequests = 20, the breaker's DefaultMinCalls (failsafe-go has no
//     minimum by default). Without one, a single refused call rejects the
//     next with p = 1/2 and three with p = 3/4: at low traffic a handful
//     of errors would throttle the client. 1 sets no minimum.
//
// Other differences: failsafe-go counts only the calls it admitted, so its
// own rejections do not hold p up (the book counts them, and so does this
// package); it takes a lock per call; it counts an outcome when it is
// recorded, whereas this package counts an accept in the bucket of its
// request, so the two leave the window together; and it has no neutral
// outcome.
//
// # Where it goes in a chain
//
// The canonical order with a throttle is overall timeout → retry →
// throttle → (hedge → limit or bulkhead →) breaker → per-attempt timeout →
// call.
//
// Inside the retry, the throttle sees each attempt as a request, as the
// downstream does: a retry's attempts are requests too, and the book's
// requests are every call the application layer attempted. A throttle
// outside a retry would count one request per call and an attempt that
// succeeded after refusals as one accept, blind to the load the retries
// add. A rejected attempt ends the retry at once (retries give up on
// callguard.ErrRejected: another attempt would be rejected independently,
// with the same p, and add a request).
//
// Beside a breaker, the throttle acts first: it sheds a fraction p of the
// attempts, which the breaker never sees (its rejections are neutral to a
// breaker); of the rest, the breaker sheds all while it is open. The
// throttle reacts gradually, from 50 % refusals at K = 2, and keeps
// shedding after the breaker closes until accepts return.
package throttle
