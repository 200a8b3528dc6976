// Package limit caps the calls in flight to a downstream, with a bounded
// queue for the calls that find the cap reached: a [Bulkhead] with a fixed
// cap, and a [Limiter] whose cap (its limit) adapts to how the downstream
// copes.
//
// Both have the same methods: Do runs a call in a slot; Acquire and
// [Permit] are the two-step form for interceptors and streams; Limit,
// InFlight and Queued read the state. Both are safe for concurrent use;
// their zero values admit nothing: make them with [NewBulkhead] and [New],
// which return a [*SettingsError] naming the first invalid field.
//
// # Admission and the queue
//
// A call that finds a free slot takes it without a lock and without
// allocating. One that finds every slot taken waits in a FIFO queue of at
// most MaxQueue calls, for at most MaxWait, and is then refused with a
// [*RejectedError] (Reason [ReasonMaxWait], Waited the time it waited);
// one that finds the queue full is refused at once (Reason
// [ReasonQueueFull]; with MaxQueue 0 that is every call that finds the
// slots taken). A waiter whose context ends leaves the queue with the
// context's error, not a refusal. MaxWait 0 with a queue waits as long as
// the caller's context allows: there is no wait bound of the policy's own.
// A freed slot goes to the head of the queue, never to a newcomer.
// Waiting takes one pooled waiter (a reusable channel and timer): no
// allocation once the pool is warm, no goroutine. A refusal allocates its
// RejectedError.
//
// Every refusal matches [ErrLimited] and callguard.ErrRejected: it is
// local, the downstream never saw the call. Both policies share the one
// sentinel; Reason says why.
//
// # The algorithms
//
// [AIMD] (Netflix concurrency-limits' AIMDLimit) raises the limit by 1 for
// each success taken with at least half the limit in flight, and on a drop
// sets it to max(MinLimit, min(limit−1, ⌊limit·BackoffRatio⌋)), with
// BackoffRatio 0.9 by default: drops come one per call, and one overload
// times out many calls at once, so a per-drop ratio of 0.5 would take the
// limit to its minimum on one bad round trip (see [DefaultBackoffRatio]).
//
// [Gradient2] (Netflix's Gradient2Limit) compares a short-term average of
// the round trips (shortRtt, over 10 samples, as Netflix's WindowedLimit
// feeds it) with a long-term exponential average (longRtt, over 600
// samples) and moves the limit toward limit·gradient + QueueSize, with
// gradient = max(0.5, min(1, Tolerance·longRtt/shortRtt)), by Smoothing
// (0.2) of the way each sample. With steady latencies the limit grows by
// QueueSize·Smoothing = 0.8 per sample; as latencies rise past Tolerance
// (1.5) times their average it falls, by at most half the way per sample.
// It also falls at its fastest when the short-term round trip takes more
// than DeadlineShare (half) of what the calls' callers had left (the
// deadline of the context a chain was called with, never one a policy of
// the chain made for its attempts): the
// long-term average follows a queue that builds slowly, and without that
// line the limit would grow until the answers took all of the callers'
// time (docs/overload.md has the measurement). A drop is left out (Netflix's rule): answers that hang are the breaker's
// business, latencies that grow under load the limit's. The formulas are
// in [Gradient2].
//
// Gradient2 is the default, and the latency algorithm offered, rather than
// Vegas (Netflix's VegasLimit), because it suits a client: Vegas estimates
// the queue from the minimum round trip ever seen, which a client measures
// through the network and the downstream's cache and load balancer, so one
// lucky fast call fixes a baseline that later calls never meet and the
// limit sinks (Netflix moved from minimum to average for this reason);
// Gradient2's average baseline decays toward the present and tolerates
// jitter. AIMD needs drops, that is timeouts, and by the time those come
// the downstream has queued for a whole timeout; Gradient2 acts on the
// latency before that, and AIMD remains the choice when latency is too
// noisy to read (calls of very unequal cost).
//
// failsafe-go's adaptivelimiter (v0.9.8) is a hybrid of both ideas: it
// compares a recent window of round trips (p90 over 1–30 s, at least 50
// samples) with a weighted baseline, derives a Vegas-like queue estimate
// limit·(1−baseline/recent), and steps the limit by log10 of itself,
// checking that throughput still rises with the inflight count; it also
// caps the limit at 5× the inflight count. Its defaults (limit 20 within
// [1, 200]) are ours. It reacts once per window; ours react per call with
// O(1) state and no window, which is simpler to reason about and to test,
// at the cost of more noise per sample, which Smoothing absorbs.
//
// # What is a drop
//
// Done(err) classifies the call: nil is a sample (its round trip counts);
// an error returned after the caller's own context ended (canceled, or its
// deadline passed) is neutral, as the breaker counts it; otherwise
// Settings.IsDrop decides between a drop and nothing. The default, [IsDrop],
// counts as drops the errors that match context.DeadlineExceeded (every
// timeout of package timeout does) but not callguard.ErrRejected (a policy
// inside this one refused the call locally). Other failures are ignored,
// as Netflix's clients ignore them: a fast error says nothing of the
// downstream's queue. [Permit.DoneNeutral] releases without a sample.
//
// # Where they go in a chain
//
// Inside the retry, outside the breaker: overall timeout → retry → limit
// or bulkhead → breaker → per-attempt timeout → call (failsafe-go's order
// too). There each attempt takes a slot and is measured alone, so the
// limit follows the downstream's own latency; a refusal ends the request's
// retries at once (a retry gives up on callguard.ErrRejected). Outside
// the retry, a request would hold its slot through its backoff waits and
// an adaptive limit would measure whole requests, retries included: when
// 20 % of the answers hang, each retried request looks ten times slower,
// and the limit collapsed in the protection benchmark's earlier runs
// (bench, hang20 under an open loop, at 1dc9ea4: 10,072 successes against
// 10,923 with the limit inside). Since Gradient2 admits calls past its
// limit while the round trips are steady, the latest run keeps 10,918
// either way, the order costing no cell beyond the seeds' spread;
// chain.New still warns (CG024): outside, a slot is held through the
// backoff waits. The per-attempt timeout is what makes drops: its error
// matches context.DeadlineExceeded while the caller's context has not
// ended. Keep MaxWait below the attempt timeout (CG022), or the queue
// spends the callers' time on waiting; and above zero when a queue is
// wanted at all, or MaxQueue with MaxWait 0 waits as long as each
// caller's context lets it.
//
// Time comes only from the standard library (time.Now, timers, context
// deadlines), so tests can run both policies in virtual time with
// testing/synctest.
package limit
