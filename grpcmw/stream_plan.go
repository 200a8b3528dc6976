package grpcmw

import (
	"context"
	"fmt"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/internal/adapter"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
)

// plan is how a chain applies to a stream: its retry wraps establishment,
// every breaker admits each attempt and learns the stream's final outcome,
// the soonest timeout bounds each attempt's creation, and a timeout
// outside the retry and the breakers bounds all attempts. Positions are in
// the chain's policies with nested chains flattened.
type plan struct {
	gates    []gate // throttles, limiters and bulkheads: taken before the breakers
	gAt      []int  // each gate's position
	retry    *bridge.Retry
	breakers []*breaker.Breaker
	at       []int // each breaker's position in the chain
	timeouts []*timeout.Policy
	tAt      []int // each timeout's position
	outer    int   // the number of timeouts outside the retry and the breakers
	inner    int   // a position inside every policy: FirstMessageTimeout's
}

// times returns, now, the soonest timeout of the chain and its position,
// and the soonest of those outside the retry and the breakers, which bounds
// all attempts (0: none). A tie goes to the outer one, as in package chain;
// an adaptive timeout gives its current value.
func (p *plan) times() (first time.Duration, firstAt int, overall time.Duration, overallAt int) {
	for i, t := range p.timeouts {
		d := t.Timeout()
		if i < p.outer && (overall == 0 || d < overall) {
			overall, overallAt = d, p.tAt[i]
		}
		if first == 0 || d < first {
			first, firstAt = d, p.tAt[i]
		}
	}
	return first, firstAt, overall, overallAt
}

// planFor makes the plan of c, or says which of its policies a stream
// cannot apply.
func planFor(c *chain.Chain) (plan, error) {
	var p plan
	policies := adapter.Flatten(c)
	p.inner = len(policies)
	for i, pol := range policies {
		switch v := pol.(type) {
		case *retry.Policy:
			if p.retry != nil {
				return p, fmt.Errorf("grpcmw: streams cannot apply %v, policy #%d of chain %v: a stream applies one retry; keep a single retry, outside the breaker", v, i+1, c)
			}
			p.retry = bridge.RetryOf(v)
		case *breaker.Breaker:
			p.breakers = append(p.breakers, v)
			p.at = append(p.at, i)
		case *timeout.Policy:
			if p.retry == nil && len(p.breakers) == 0 {
				p.outer++ // outside: bounds all attempts
			}
			p.timeouts = append(p.timeouts, v)
			p.tAt = append(p.tAt, i)
		case *throttle.Throttle:
			p.gates = append(p.gates, func(ctx context.Context) (permit, error) { return v.Allow(ctx) })
			p.gAt = append(p.gAt, i)
		case *limit.Limiter:
			p.gates = append(p.gates, func(ctx context.Context) (permit, error) { return v.Acquire(ctx) })
			p.gAt = append(p.gAt, i)
		case *limit.Bulkhead:
			p.gates = append(p.gates, func(ctx context.Context) (permit, error) { return v.Acquire(ctx) })
			p.gAt = append(p.gAt, i)
		case *hedge.Policy:
			return p, fmt.Errorf("grpcmw: streams cannot apply %v, policy #%d of chain %v: a stream's messages cannot be sent twice at once; use grpcmw.UnaryOnly(), or give streams a chain without it", v, i+1, c)
		case *fallback.Policy:
			return p, fmt.Errorf("grpcmw: streams cannot apply %v, policy #%d of chain %v: a fallback cannot answer a stream; use grpcmw.UnaryOnly(), or give streams a chain without it", v, i+1, c)
		default:
			return p, fmt.Errorf("grpcmw: streams cannot apply %T, policy #%d of chain %v: a stream runs only breakers, a retry, timeouts, throttles, limiters and bulkheads; use grpcmw.UnaryOnly(), or give streams a chain of those", v, i+1, c)
		}
	}
	return p, nil
}

// gate admits a stream's attempt: a throttle, a limiter or a bulkhead.
type gate func(ctx context.Context) (permit, error)

// permit is a gate's permit for one attempt.
type permit interface {
	Done(err error)
	DoneNeutral()
}
