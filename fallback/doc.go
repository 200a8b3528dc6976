// Package fallback degrades instead of failing: when a call fails in a way it
// covers, it answers with something else — a default value, a cached or
// stale value, or a call to an alternative service (SEEDS B).
//
// By default a fallback covers only breaker.ErrOpen: the downstream is known
// to be down, and failing fast into a degraded answer is the point. With
// [OnAnyFailure] it covers every failure. Place it outside the retry and the
// breaker (chain.New(fallback, retry, breaker, …)): inside them it hides the
// failures they need to see, and a chain's lint says so.
package fallback
