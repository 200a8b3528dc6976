// Package rules has a chain for every rule of the lint, built as a
// program would: the analyzer's findings on each are checked against
// the expectations beside them, and against what chain.New says when
// the same functions run (cmd/findings).
package rules

import (
	"context"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
)

var (
	_ = context.Background
	_ fallback.Option
	_ hedge.Settings
	_ limit.Settings
	_ throttle.Settings
)

func CG001() (*chain.Chain, error) {
	r, _ := retry.New(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second), retry.RetryWhenOpen())
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	t, _ := timeout.New(time.Second)
	return chain.New(
		r, // want "CG001"
		b,
		t, // want "CG015"
	)
}

func CG002() (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	r, _ := retry.New(retry.MaxAttempts(3))
	t, _ := timeout.New(time.Second)
	return chain.New(
		b,
		r, // want "CG002"
		t, // want "CG015"
	)
}

func CG003() (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	t, _ := timeout.New(100*time.Millisecond, timeout.Latency(0.8, 100*time.Millisecond), timeout.Latency(1, time.Second))
	return chain.New(
		b,
		t, // want "CG003"
	)
}

func CG004() (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	t, _ := timeout.New(3 * time.Second)
	return chain.New(
		b, // want "CG004"
		t, // want "CG015"
	)
}

func CG004deadline() (*chain.Chain, error) {
	r, _ := retry.New(retry.MaxAttempts(5))
	b, _ := breaker.New(breaker.Settings{FailureRate: 0.5})
	t, _ := timeout.New(10 * time.Second)
	return chain.Options{CallerDeadline: time.Second}.New(
		r,
		b, // want "CG004" "CG010" "CG027"
		t, // want "CG015"
	)
}

func CG005() (*chain.Chain, error) {
	o, _ := timeout.New(2 * time.Second)
	r, _ := retry.New(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	t, _ := timeout.New(time.Second)
	return chain.New(
		o, // want "CG005"
		r,
		b,
		t, // want "CG015"
	)
}

func CG006() (*chain.Chain, error) {
	r, _ := retry.New(retry.MaxAttempts(3))
	r2, _ := retry.New(retry.MaxAttempts(4))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	t, _ := timeout.New(time.Second)
	return chain.New(
		r, // want "CG006"
		r2,
		b,
		t, // want "CG015"
	)
}

func CG007() (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, HalfOpenProbes: 10})
	t, _ := timeout.New(time.Second)
	return chain.New(
		b, // want "CG007" "CG011"
		t, // want "CG015"
	)
}

func CG008() (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	f, _ := fallback.New(func(context.Context, error) error { return nil }, fallback.OnAnyFailure())
	t, _ := timeout.New(time.Second)
	return chain.New(
		b,
		f, // want "CG008"
		t, // want "CG015"
	)
}

func CG009() (*chain.Chain, error) {
	t, _ := timeout.New(time.Second)
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	return chain.New(
		t,
		b, // want "CG009"
	)
}

func CG010() (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{FailureRate: 0.5, Window: time.Second})
	t, _ := timeout.New(800 * time.Millisecond)
	return chain.New(
		b, // want "CG010"
		t, // want "CG015"
	)
}

func CG011() (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, HalfOpenProbes: 8, HalfOpenSuccesses: 4})
	t, _ := timeout.New(time.Second)
	return chain.New(
		b, // want "CG011"
		t, // want "CG015"
	)
}

func CG012() (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 5 * time.Second})
	t, _ := timeout.New(time.Second)
	return chain.Options{DownstreamRecovery: 30 * time.Second}.New(
		b, // want "CG012"
		t, // want "CG015"
	)
}

func CG013() (*chain.Chain, error) {
	bu, _ := retry.NewBudget(0.1, 10)
	r, _ := retry.New(retry.MaxAttempts(3), retry.WithBudget(bu))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	t, _ := timeout.New(time.Second)
	return chain.New(
		r, // want "CG013"
		b,
		t, // want "CG015"
	)
}

func CG014() (*chain.Chain, error) {
	o, _ := timeout.New(time.Second)
	r, _ := retry.New(retry.MaxAttempts(3))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	t, _ := timeout.New(300*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{}))
	return chain.New(
		o, // want "CG005"
		r,
		b,
		t, // want "CG014"
	)
}

func CG015() (*chain.Chain, error) {
	r, _ := retry.New(retry.MaxAttempts(3))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	t, _ := timeout.New(300 * time.Millisecond)
	return chain.New(
		r,
		b,
		t, // want "CG015"
	)
}

func CG016() (*chain.Chain, error) {
	h, _ := hedge.New(hedge.Settings{Delay: 50 * time.Millisecond})
	bu, _ := retry.NewBudget(0.1, 10)
	r, _ := retry.New(retry.MaxAttempts(3), retry.WithBudget(bu))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	t, _ := timeout.New(time.Second)
	return chain.New(
		h, // want "CG016" "CG018"
		r, // want "CG013"
		b,
		t, // want "CG015"
	)
}

func CG017() (*chain.Chain, error) {
	bu, _ := retry.NewBudget(0.1, 10)
	r, _ := retry.New(retry.MaxAttempts(3), retry.WithBudget(bu))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	h, _ := hedge.New(hedge.Settings{Delay: 50 * time.Millisecond, MaxHedges: 2, Budget: 0.1})
	t, _ := timeout.New(time.Second)
	return chain.New(
		r, // want "CG013"
		b,
		h, // want "CG017" "CG018"
		t, // want "CG015"
	)
}

func CG019() (*chain.Chain, error) {
	bu, _ := retry.NewBudget(0.1, 10)
	r, _ := retry.New(retry.MaxAttempts(3), retry.WithBudget(bu))
	h, _ := hedge.New(hedge.Settings{Delay: 10 * time.Millisecond})
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	t, _ := timeout.New(time.Second, timeout.Latency(0.5, 20*time.Millisecond), timeout.Latency(0.99, 200*time.Millisecond))
	return chain.New(
		r, // want "CG013"
		h, // want "CG019" "CG018"
		b,
		t,
	)
}

func CG021() (*chain.Chain, error) {
	bu, _ := retry.NewBudget(0.1, 10)
	r, _ := retry.New(retry.MaxAttempts(3), retry.WithBudget(bu))
	b, _ := breaker.New(breaker.Settings{FailureRate: 0.5, Window: 10 * time.Second, MinCalls: 20})
	th, _ := throttle.New(throttle.Settings{})
	t, _ := timeout.New(time.Second)
	return chain.New(
		r,  // want "CG013"
		b,  // want "CG027"
		th, // want "CG021"
		t,  // want "CG015"
	)
}

func CG022() (*chain.Chain, error) {
	bu, _ := retry.NewBudget(0.1, 10)
	r, _ := retry.New(retry.MaxAttempts(3), retry.WithBudget(bu))
	bh, _ := limit.NewBulkhead(limit.BulkheadSettings{MaxConcurrent: 10, MaxQueue: 20, MaxWait: time.Second})
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	t, _ := timeout.New(500 * time.Millisecond)
	return chain.New(
		r,  // want "CG013"
		bh, // want "CG022"
		b,
		t, // want "CG015"
	)
}

func CG023() (*chain.Chain, error) {
	r, _ := retry.New(retry.MaxAttempts(3))
	h, _ := hedge.New(hedge.Settings{Delay: 50 * time.Millisecond})
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	t, _ := timeout.New(time.Second)
	return chain.New(
		r,
		h, // want "CG023" "CG018"
		b,
		t, // want "CG015"
	)
}

func CG024() (*chain.Chain, error) {
	l, _ := limit.New(limit.Settings{})
	bu, _ := retry.NewBudget(0.1, 10)
	r, _ := retry.New(retry.MaxAttempts(3), retry.WithBudget(bu))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	t, _ := timeout.New(time.Second)
	return chain.New(
		l, // want "CG024"
		r, // want "CG013"
		b,
		t, // want "CG015"
	)
}

func CG025() (*chain.Chain, error) {
	r, _ := retry.New(retry.MaxAttempts(3))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	t, _ := timeout.New(time.Second)
	return chain.New( // want "CG025"
		r,
		b,
		b,
		t,
	)
}

func CG026() (*chain.Chain, error) {
	r, _ := retry.New(retry.MaxAttempts(3))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	b2, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 3})
	t, _ := timeout.New(time.Second)
	return chain.New(
		r,
		b, // want "CG026"
		b2,
		t, // want "CG015"
	)
}

func CG027() (*chain.Chain, error) {
	r, _ := retry.New(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second))
	b, _ := breaker.New(breaker.Settings{OpenTimeout: time.Second, HalfOpenSuccesses: 2})
	t, _ := timeout.New(300*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{Quantile: 0.99, Window: 5 * time.Second, Max: time.Second}))
	return chain.New(
		r,
		b, // want "CG027"
		t,
	)
}

func Recommended() (*chain.Chain, error) {
	r, _ := retry.New(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second), retry.FitDeadline())
	l, _ := limit.New(limit.Settings{})
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 10, FailureRate: 0.79, OpenTimeout: time.Second, HalfOpenSuccesses: 2})
	t, _ := timeout.New(300*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{Quantile: 0.99, Window: 5 * time.Second, Max: time.Second}))
	return chain.New(
		r,
		l,
		b,
		t,
	)
}
