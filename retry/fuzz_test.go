package retry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/retry"
)

// FuzzOptions: New never panics on any options. It returns an error that
// names the invalid option, or a policy whose nominal waits are
// Attempts()-1 durations, none negative, and that runs a failing call at
// most Attempts() times, waiting no longer than the waits it says (plus
// jitter), inside a caller's deadline.
func FuzzOptions(f *testing.F) {
	f.Add(3, int64(100*time.Millisecond), int64(time.Second), 0.2, int64(30*time.Second), false, 0.1, 1.0, true)
	f.Add(1, int64(0), int64(0), 0.0, int64(0), true, 0.0, 0.0, false)
	f.Add(10000, int64(1), int64(1<<62), 1.0, int64(1<<63-1), false, 1.0, 1e9, true)
	f.Add(-1, int64(-1), int64(-2), -0.5, int64(-1), false, -1.0, -1.0, true)
	f.Add(1<<62, int64(1<<62), int64(1), 2.0, int64(1), true, 2.0, 1e300, true)
	errDown := errors.New("down")
	f.Fuzz(func(t *testing.T, attempts int, initial, maxWait int64, jitter float64, maxPushback int64, constant bool, ratio, perSecond float64, budget bool) {
		opts := []retry.Option{retry.MaxAttempts(attempts), retry.Jitter(jitter), retry.MaxPushback(time.Duration(maxPushback))}
		if constant {
			opts = append(opts, retry.Constant(time.Duration(initial)))
		} else {
			opts = append(opts, retry.Exponential(time.Duration(initial), time.Duration(maxWait)))
		}
		if budget {
			b, err := retry.NewBudget(ratio, perSecond)
			if err != nil {
				if !strings.Contains(err.Error(), "NewBudget") && !strings.Contains(err.Error(), "ratio") && !strings.Contains(err.Error(), "perSecond") {
					t.Fatalf("NewBudget(%v, %v): %v, names nothing", ratio, perSecond, err)
				}
				return
			}
			opts = append(opts, retry.WithBudget(b))
		}
		p, err := retry.New(opts...)
		if err != nil {
			if p != nil || !strings.HasPrefix(err.Error(), "retry: ") || !strings.Contains(err.Error(), "(") {
				t.Fatalf("New: %v, %v; want an error naming the option", p, err)
			}
			return
		}
		waits := bridge.RetryOf(p).Waits()
		if len(waits) != p.Attempts()-1 {
			t.Fatalf("%v: %d waits for %d attempts", p, len(waits), p.Attempts())
		}
		for _, w := range waits {
			if w < 0 {
				t.Fatalf("%v: a negative wait in %v", p, waits)
			}
		}
		if p.Attempts() > 50 {
			return // the run below is bounded to keep the fuzzer fast
		}
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			calls := 0
			start := time.Now()
			err := p.Do(ctx, func(context.Context) error { calls++; return errDown })
			if !errors.Is(err, errDown) || calls < 1 || calls > p.Attempts() || time.Since(start) > time.Minute {
				t.Fatalf("%v: Do = %v after %d calls in %v", p, err, calls, time.Since(start))
			}
		})
	})
}
