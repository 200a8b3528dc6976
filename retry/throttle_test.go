package retry_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/retry"
)

// TestThrottle follows gRFC A6's token arithmetic with maxTokens 10 and
// tokenRatio 0.1: retries stop once the count is at most 5, a failed
// attempt takes a token, a successful call gives back 0.1.
func TestThrottle(t *testing.T) {
	th, err := retry.NewThrottle(10, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := retry.New(retry.MaxAttempts(3), retry.Constant(0), retry.WithThrottle(th))
	if err != nil {
		t.Fatal(err)
	}
	fail := errors.New("unavailable")
	run := func(ok bool) (attempts int, err error) {
		err = p.Do(context.Background(), func(context.Context) error {
			attempts++
			if ok {
				return nil
			}
			return fail
		})
		return attempts, err
	}
	reason := func(err error) retry.Reason {
		var ex *retry.ExhaustedError
		if errors.As(err, &ex) {
			return ex.Reason
		}
		return 0
	}
	for i, step := range []struct {
		ok       bool
		attempts int
		reason   retry.Reason
		tokens   float64
	}{
		{false, 3, retry.ReasonAttempts, 7}, // 10 → 9 → 8 → 7
		{false, 2, retry.ReasonBudget, 5},   // 6, then 5: at most half
		{true, 1, 0, 5.1},
		{false, 1, retry.ReasonBudget, 4.1},
	} {
		n, err := run(step.ok)
		if n != step.attempts || reason(err) != step.reason || !near(th.Tokens(), step.tokens) {
			t.Fatalf("call %d: %d attempts, %v (reason %v), %.2f tokens; want %d, reason %v, %.2f", i+1, n, err, reason(err), th.Tokens(), step.attempts, step.reason, step.tokens)
		}
	}
	for range 20 { // 20 successes: 4.1 + 2 = 6.1
		run(true)
	}
	if n, err := run(false); n != 2 || reason(err) != retry.ReasonBudget {
		t.Errorf("after 20 successes: %d attempts, %v; want 2 (6.1 → 5.1 retries, 4.1 does not)", n, err)
	}
	for range 1000 {
		run(true)
	}
	if got := th.Tokens(); got != 10 {
		t.Errorf("after 1000 successes: %v tokens, want maxTokens, 10", got)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestThrottleInvalid(t *testing.T) {
	for _, tc := range []struct{ max, ratio float64 }{{0, 0.1}, {1001, 0.1}, {10, 0}, {10, -1}} {
		if _, err := retry.NewThrottle(tc.max, tc.ratio); err == nil || !strings.Contains(err.Error(), "NewThrottle") {
			t.Errorf("NewThrottle(%v, %v): %v, want an error", tc.max, tc.ratio, err)
		}
	}
	if _, err := retry.New(retry.WithThrottle(nil)); err == nil || !strings.Contains(err.Error(), "WithThrottle") {
		t.Errorf("WithThrottle(nil): %v, want an error naming it", err)
	}
	if _, err := retry.New(retry.ExponentialBy(time.Second, time.Second, 0)); err == nil || !strings.Contains(err.Error(), "multiplier") {
		t.Errorf("ExponentialBy multiplier 0.5: %v, want an error naming the multiplier", err)
	}
}

// TestExponentialBy: gRPC's schedule, initialBackoff 100 ms ×1.5 up to
// 300 ms: 100, 150, 225, 300 ms.
func TestExponentialBy(t *testing.T) {
	p, err := retry.New(retry.MaxAttempts(5), retry.ExponentialBy(100*time.Millisecond, 300*time.Millisecond, 1.5))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{100 * time.Millisecond, 150 * time.Millisecond, 225 * time.Millisecond, 300 * time.Millisecond}
	if got := bridge.RetryOf(p).Waits(); !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
}

// TestExponentialByShrinking: gRPC's schedule starting above its cap,
// initialBackoff 100 ms ×0.1 up to 20 ms: min(100 ms × 0.1ⁿ, 20 ms), 20,
// 10, 1, 0.1 ms, as grpc-go waits (not clipped first, then multiplied:
// 20, 2, 0.2 ms).
func TestExponentialByShrinking(t *testing.T) {
	p, err := retry.New(retry.MaxAttempts(5), retry.ExponentialBy(100*time.Millisecond, 20*time.Millisecond, 0.1))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{20 * time.Millisecond, 10 * time.Millisecond, time.Millisecond, 100 * time.Microsecond}
	if got := bridge.RetryOf(p).Waits(); !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
	if _, err := retry.New(retry.ExponentialBy(time.Second, time.Millisecond, 2)); err == nil {
		t.Error("ExponentialBy(1s, 1ms, 2): no error, want one (max below initial, growing)")
	}
}

// TestThrottleSmallRatio: tokenRatio is kept as given, as grpc-go keeps it
// (its retryThrottler adds the service config's ratio unrounded): with
// maxTokens 10 and tokenRatio 0.0004, 6 failures leave 4 tokens, and
// 20,000 successes give back 8, up to 10.
func TestThrottleSmallRatio(t *testing.T) {
	th, err := retry.NewThrottle(10, 0.0004)
	if err != nil {
		t.Fatal(err)
	}
	p, err := retry.New(retry.MaxAttempts(2), retry.Constant(0), retry.WithThrottle(th))
	if err != nil {
		t.Fatal(err)
	}
	fail := errors.New("unavailable")
	for range 4 { // 2 failures, 2, then 1 each (throttled)
		_ = p.Do(context.Background(), func(context.Context) error { return fail })
	}
	if got := th.Tokens(); got != 4 {
		t.Fatalf("after 6 failures: %v tokens, want 4", got)
	}
	for range 20000 {
		_ = p.Do(context.Background(), func(context.Context) error { return nil })
	}
	if got := th.Tokens(); got != 10 {
		t.Errorf("after 20,000 successes: %v tokens, want 10 (grpc-go's)", got)
	}
}
