package chain_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// The canonical order: overall timeout → retry → breaker → attempt timeout.
func Example() {
	overall, _ := timeout.New(2 * time.Second)
	r, _ := retry.New(retry.MaxAttempts(3), retry.Exponential(10*time.Millisecond, 100*time.Millisecond))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	// The attempt timeout, tied to the downstream's healthy tail (99 % of
	// its calls answer within 120 ms), so the lint can check it.
	attempt, _ := timeout.New(300*time.Millisecond, timeout.Latency(0.99, 120*time.Millisecond))

	c, err := chain.New(overall, r, b, attempt)
	if err != nil {
		panic(err)
	}
	fmt.Println(c)
	fmt.Println(len(c.Findings()), "findings")

	calls := 0
	err = c.Do(context.Background(), func(ctx context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("503")
		}
		return nil
	})
	fmt.Println(calls, err)
	// Output:
	// timeout(2s) → retry(3) → breaker(5 consecutive, open 10s, 3 probes) → timeout(300ms)
	// 0 findings
	// 3 <nil>
}

// A retry inside the breaker: the lint says what it will do, in numbers.
func Example_lint() {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	r, _ := retry.New(retry.MaxAttempts(3))
	attempt, _ := timeout.New(time.Second)
	c, _ := chain.New(b, r, attempt)
	for _, f := range c.Findings() {
		fmt.Println(f.Code, f.Severity)
	}
	_, err := chain.Options{Strict: true}.New(b, r, attempt)
	fmt.Println(err != nil)
	// Output:
	// CG002 warning
	// CG015 info
	// true
}
