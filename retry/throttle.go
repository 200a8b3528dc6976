package retry

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Throttle is gRPC's retry throttling (gRFC A6, a service config's
// retryThrottling), for the retry policies given it with [WithThrottle]:
// a token count that starts at maxTokens; each failed attempt the policy
// deems retryable takes one token (down to zero), each call that succeeds
// gives back tokenRatio (up to maxTokens), and while the count is at most
// half of maxTokens no retry is made (the retry ends with ReasonBudget).
// After a run of failures it takes maxTokens / 2 / tokenRatio successful
// calls to retry again. grpc-go keeps one per ClientConn; share one
// Throttle among the policies of a connection's calls for the same.
//
// A Throttle is safe for concurrent use. Create one with [NewThrottle].
// Unlike a [Budget], it does not bound retries per call: under a total
// outage it allows none past the first maxTokens / 2 failures.
type Throttle struct {
	max, ratio float64
	// owned: the calls' successes are credited by the throttle's owner
	// (bridge.ThrottleOwn: the interceptors of a service config credit
	// every successful RPC of the connection, as grpc-go does), not by
	// the retries.
	owned bool

	mu     sync.Mutex
	tokens float64
}

// NewThrottle returns a throttle of maxTokens, in (0, 1000], and
// tokenRatio, > 0 (gRPC's bounds). tokenRatio is kept as given, as
// grpc-go keeps a service config's: a small one, such as 0.0004, is not
// rounded to 0 (gRFC A6 mentions 3 decimal places; grpc-go does not
// round).
func NewThrottle(maxTokens, tokenRatio float64) (*Throttle, error) {
	switch {
	case !(maxTokens > 0 && maxTokens <= 1000):
		return nil, fmt.Errorf("retry: NewThrottle maxTokens = %v: must be within (0, 1000]", maxTokens)
	case !(tokenRatio > 0) || math.IsInf(tokenRatio, 1):
		return nil, fmt.Errorf("retry: NewThrottle tokenRatio = %v: must be a finite number > 0", tokenRatio)
	}
	return &Throttle{max: maxTokens, ratio: tokenRatio, tokens: maxTokens}, nil
}

// failed takes a token for a retryable failure, and says whether the
// retry is throttled.
func (t *Throttle) failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tokens = max(0, t.tokens-1)
	return t.tokens <= t.max/2
}

// succeeded gives back a call's success, unless the throttle is owned.
func (t *Throttle) succeeded() {
	if !t.owned {
		t.credit()
	}
}

// credit gives back a call's success.
func (t *Throttle) credit() {
	t.mu.Lock()
	t.tokens = min(t.max, t.tokens+t.ratio)
	t.mu.Unlock()
}

// Tokens returns the token count now.
func (t *Throttle) Tokens() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tokens
}

// WithThrottle makes the retries ask t (see [Throttle]).
func WithThrottle(t *Throttle) Option {
	return optionFunc(func(c *config) {
		if t == nil {
			bad(c, "WithThrottle(nil): needs a throttle from NewThrottle")
		}
		c.throttle = t
	})
}

// ExponentialBy waits initial, then multiplier times as long after each
// failure, up to max: gRPC's retryPolicy schedule (initialBackoff,
// backoffMultiplier, maxBackoff; a multiplier below 1 shrinks the waits).
// The wait before retry n is min(initial × multiplier^(n-1), max), as in
// grpc-go: with a multiplier below 1, initial may exceed max, and the
// waits are max until initial × multiplier^(n-1) falls below it (100 ms,
// 20 ms, ×0.1: 20, 10, 1 ms). Exponential is ExponentialBy with
// multiplier 2.
func ExponentialBy(initial, max time.Duration, multiplier float64) Option {
	return optionFunc(func(c *config) {
		switch {
		case initial < 0:
			bad(c, "ExponentialBy(%v, %v, %v): initial must be >= 0", initial, max, multiplier)
		case max < initial && multiplier >= 1:
			bad(c, "ExponentialBy(%v, %v, %v): max must be >= initial (or the multiplier below 1)", initial, max, multiplier)
		case max < 0:
			bad(c, "ExponentialBy(%v, %v, %v): max must be >= 0", initial, max, multiplier)
		case !(multiplier > 0) || math.IsInf(multiplier, 1):
			bad(c, "ExponentialBy(%v, %v, %v): multiplier must be a finite number > 0", initial, max, multiplier)
		}
		c.initial, c.max, c.multiplier, c.schedule = initial, max, multiplier, "Exponential"
	})
}

// shrinking is gRPC's schedule when it starts above its cap: the wait
// before retry n is min(initial × multiplier^(n-1), max), the product
// kept unclipped, as grpc-go computes it (backoff/v4 clips first, then
// multiplies); jittered from math/rand/v2 when jitter is set.
type shrinking struct {
	initial, next, multiplier, jitter float64
	max                               time.Duration
}

func (s *shrinking) NextBackOff() time.Duration {
	d := time.Duration(min(s.next, float64(s.max)))
	s.next *= s.multiplier
	if s.jitter > 0 && d > 0 {
		d = jittered(d, s.jitter, rand.Float64())
	}
	return d
}

func (s *shrinking) Reset() { s.next = s.initial }
