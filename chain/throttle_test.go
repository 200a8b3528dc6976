package chain_test

import (
	"context"
	"errors"
	"testing"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
)

// TestRetryThrottleRefillsThroughChain: a call that succeeds at its first
// attempt credits the retry's throttle through a chain as through the
// retry itself (the chain makes that attempt, not the policy): drained by
// failures, then 50 successes give back 50 × 0.1 tokens either way.
func TestRetryThrottleRefillsThroughChain(t *testing.T) {
	tokens := map[string]float64{}
	for _, way := range []string{"retry", "chain"} {
		th, err := retry.NewThrottle(10, 0.1)
		if err != nil {
			t.Fatal(err)
		}
		p, err := retry.New(retry.MaxAttempts(2), retry.Constant(0), retry.WithThrottle(th))
		if err != nil {
			t.Fatal(err)
		}
		c, err := chain.New(p)
		if err != nil {
			t.Fatal(err)
		}
		do := p.Do
		if way == "chain" {
			do = c.Do
		}
		fail := errors.New("unavailable")
		for range 10 {
			_ = do(context.Background(), func(context.Context) error { return fail })
		}
		for range 50 {
			_ = do(context.Background(), func(context.Context) error { return nil })
		}
		tokens[way] = th.Tokens()
	}
	if tokens["chain"] != tokens["retry"] || tokens["retry"] < 4.9 {
		t.Errorf("tokens after 10 failures and 50 successes: through the retry %v, through the chain %v; want 5 for both", tokens["retry"], tokens["chain"])
	}
}
