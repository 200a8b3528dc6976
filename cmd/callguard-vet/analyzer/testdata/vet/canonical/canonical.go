// Package canonical builds the recommended order, chain.New(retry,
// breaker, timeout): its only finding is an info (CG015, the timeout's
// tail), which the analyzer reports only with -infos. go vet -vettool
// over it exits 0 and prints nothing.
package canonical

import (
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// Chain builds retry, then breaker, then timeout.
func Chain() (*chain.Chain, error) {
	r, err := retry.New(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second))
	if err != nil {
		return nil, err
	}
	b, err := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	t, err := timeout.New(time.Second)
	if err != nil {
		return nil, err
	}
	return chain.New(r, b, t)
}
