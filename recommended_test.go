package callguard_test

import (
	"context"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/preset"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
)

// TestRecommendedChainsAreClean builds the chains README.md and
// docs/ordering.md recommend, as written there, and lints them strictly:
// the docs must not recommend what the lint warns about.
func TestRecommendedChainsAreClean(t *testing.T) {
	r, _ := retry.New(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second), retry.FitDeadline())
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 10, ConsecutiveFor: 500 * time.Millisecond, OpenTimeout: 800 * time.Millisecond, HalfOpenSuccesses: 2, IsExcluded: grpcmw.Overloaded})
	attempt, _ := timeout.New(300*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{
		Quantile: 0.99, Window: 5 * time.Second, Max: time.Second,
	}))
	l, _ := limit.New(limit.Settings{})
	if c, err := (chain.Options{Strict: true}).New(r, l, b, attempt); err != nil {
		t.Errorf("README's chain: %v", err)
	} else if fs := c.Findings(); len(fs) != 0 {
		t.Errorf("README's chain: %d findings, want none (the README loops over them; an info on the recommended chain is noise): %v", len(fs), fs)
	} else if p, err := preset.Chain(preset.Settings{}, grpcmw.Overloaded); err != nil || p.String() != c.String() {
		// what Standard builds is what README's long form says it builds
		t.Errorf("preset.Chain = %v, %v; README's long form %v", p, err, c)
	}
	// README's per-client chain for HTTP: the same with httpmw's refusals.
	hb, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 10, ConsecutiveFor: 500 * time.Millisecond, OpenTimeout: 800 * time.Millisecond, HalfOpenSuccesses: 2, IsExcluded: httpmw.Overloaded})
	hl, _ := limit.New(limit.Settings{})
	hr, _ := retry.New(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second), retry.FitDeadline())
	hattempt, _ := timeout.New(300*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{
		Quantile: 0.99, Window: 5 * time.Second, Max: time.Second,
	}))
	if c, err := (chain.Options{Strict: true}).New(hr, hl, hb, hattempt); err != nil {
		t.Errorf("README's HTTP chain: %v", err)
	} else if fs := c.Findings(); len(fs) != 0 {
		t.Errorf("README's HTTP chain: findings %v, want none", fs)
	}
	fb, _ := fallback.New(func(context.Context, error) error { return nil })
	overall, _ := timeout.New(3500 * time.Millisecond)
	if _, err := (chain.Options{Strict: true}).New(fb, overall, r, l, b, attempt); err != nil {
		t.Errorf("docs/ordering.md's chain: %v", err)
	}
	// docs/ordering.md's and docs/overload.md's chain with every overload
	// policy.
	budget, _ := retry.NewBudget(0.1, 10)
	rb, _ := retry.New(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second), retry.WithBudget(budget))
	th, _ := throttle.New(throttle.Settings{})
	h, _ := hedge.New(hedge.Settings{Delay: 50 * time.Millisecond, Quantile: 0.95})
	if _, err := (chain.Options{Strict: true}).New(fb, overall, rb, th, h, l, b, attempt); err != nil {
		t.Errorf("the chain with every overload policy: %v", err)
	}
}
