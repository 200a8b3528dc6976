// Package adapter is what the gRPC and HTTP adapters share: how they look
// into a chain (its breakers and fallbacks, nested chains included), how
// they report the breakers of their keyed sets, and how they parse a
// server's retry advice.
package adapter

import (
	"context"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
)

// Flatten returns c's policies, outermost first, with the policies of
// nested chains in their place.
func Flatten(c *chain.Chain) []chain.Policy {
	var out []chain.Policy
	for _, p := range c.Policies() {
		if n, ok := p.(*chain.Chain); ok {
			out = append(out, Flatten(n)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// Breakers returns the breakers of c, nested chains included, outermost
// first.
func Breakers(c *chain.Chain) []*breaker.Breaker {
	var bs []*breaker.Breaker
	for _, p := range Flatten(c) {
		if b, ok := p.(*breaker.Breaker); ok {
			bs = append(bs, b)
		}
	}
	return bs
}

// HasHedge reports whether c has a hedging policy, nested chains included.
func HasHedge(c *chain.Chain) bool {
	for _, p := range Flatten(c) {
		if _, ok := p.(*hedge.Policy); ok {
			return true
		}
	}
	return false
}

// Concurrent reports whether c may run attempts of one call at once: it
// has a hedge, or a policy the chain does not know (a user's own, which
// may), nested chains included.
func Concurrent(c *chain.Chain) bool {
	for _, p := range Flatten(c) {
		switch p.(type) {
		case *breaker.Breaker, *retry.Policy, *timeout.Policy, *fallback.Policy, *throttle.Throttle, *limit.Limiter, *limit.Bulkhead:
		default:
			return true
		}
	}
	return false
}

// NoHedge returns ctx marked so that the hedges of a chain run under it
// leave the call alone: a call that is not idempotent.
func NoHedge(ctx context.Context) context.Context {
	return context.WithValue(ctx, bridge.NoHedge{}, true)
}

// HasFallback reports whether c has a fallback policy, nested chains
// included.
func HasFallback(c *chain.Chain) bool {
	for _, p := range Flatten(c) {
		if _, ok := p.(*fallback.Policy); ok {
			return true
		}
	}
	return false
}

// Watch makes fn receive the state changes of c's breakers, with key as
// their Key. A nil fn does nothing.
func Watch(c *chain.Chain, key string, fn func(breaker.StateChange)) {
	if fn == nil {
		return
	}
	for _, b := range Breakers(c) {
		bridge.BreakerWatch(b, key, fn)
	}
}

// Snapshots lists the breakers of the chains each gives, by key, with
// their state and counters now.
func Snapshots(each func(fn func(key string, c *chain.Chain))) []breaker.Snapshot {
	var out []breaker.Snapshot
	each(func(key string, c *chain.Chain) {
		for _, b := range Breakers(c) {
			out = append(out, breaker.Snapshot{Key: key, Name: b.Settings().Name, State: b.State(), Override: b.Override(), Counts: b.Counts()})
		}
	})
	return out
}
