// Package hedge cuts tail latency by hedging: when an attempt has not
// answered after a delay, another copy of the call is started beside it;
// the first success wins and the others are canceled ("The Tail at
// Scale", Dean and Barroso, CACM 2013: hedging after the 95th percentile
// cut a BigTable p99.9 from 1,800 ms to 74 ms for 2 % more requests).
//
// The delay is fixed ([Settings].Delay) or follows a quantile of the
// latencies observed over a sliding window ([Settings].Quantile, e.g.
// 0.95), with the same histogram as the adaptive timeout. A budget caps
// the extra load: on average at most [Settings].Budget hedges per call
// (default 5 %), so a downstream that slows down as a whole gets a few
// percent more calls, not twice as many. On a model of the paper's
// workload (1 % of calls 100× slow), hedging after the observed p95 cuts
// the p99.9 from 1.2 s to 24.4 ms at 1 % more attempts (TestTailCut).
//
// Hedge only idempotent calls: the gRPC and HTTP adapters of this kit
// hedge only the calls they would retry (gRPC methods declared
// idempotent; HTTP methods that are idempotent or requests with an
// Idempotency-Key, whose body can be replayed with GetBody). gRPC streams
// are not hedged: grpcmw refuses a chain with a hedge for streams (use
// grpcmw.UnaryOnly).
//
// Where it goes in a chain: inside the retry and outside the breaker and
// the attempt timeout,
//
//	retry → (throttle →) hedge → (limit →) breaker → attempt timeout → call
//
// so each attempt, hedged or not, is judged by the breaker and bounded by
// the attempt timeout, and a retry makes at most MaxAttempts hedged calls.
// chain.New warns about a hedge outside a retry (every retry is hedged:
// attempts multiply), inside a breaker (the breaker sees one outcome for
// several attempts, and a half-open probe becomes two calls), on a chain
// without a retry budget, and with a fixed delay below the latency the
// attempt timeout declares for the median.
//
// A loser's context is canceled as soon as another attempt succeeds, and
// Do returns once every attempt has returned: a call must end when its
// context is canceled, or a hedged call lasts as long as its slowest
// attempt. The first attempt runs on the caller's goroutine, a hedge on a
// goroutine of its own. A call answered before the delay costs a
// cancelable context and no other allocation (the run and its timer are
// reused).
package hedge
