package breaker_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
)

// TestWindowAfterLongIdleGap: after an idle gap long enough for the time
// window's 32-bit bucket numbers to wrap around (30 days of 1 ms buckets),
// new calls still count, and the rate trips.
func TestWindowAfterLongIdleGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := mustNew(t, breaker.Settings{FailureRate: 0.5, Window: 10 * time.Millisecond, MinCalls: 4})
		_ = b.Do(ctx, func(context.Context) error { return errDown })
		for range 3 {
			_ = b.Do(ctx, func(context.Context) error { return nil })
		}
		time.Sleep(30 * 24 * time.Hour)
		for range 4 {
			_ = b.Do(ctx, func(context.Context) error { return errDown })
		}
		if st := b.State(); st != breaker.StateOpen {
			t.Fatalf("4 failures in 4 calls after the gap: state %v, want open", st)
		}
	})
}

// TestCallbackPanicKeepsNoProbe: an OnStateChange that panics as the
// breaker goes half-open does not keep the probe slot of the call that
// was not made.
func TestCallbackPanicKeepsNoProbe(t *testing.T) {
	for _, engine := range []breaker.Engine{breaker.EngineNative, breaker.EngineGobreaker} {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			panicked := false
			b := mustNew(t, breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenProbes: 1, Engine: engine,
				OnStateChange: func(_, to breaker.State) {
					if to == breaker.StateHalfOpen && !panicked {
						panicked = true
						panic("boom")
					}
				}})
			_ = b.Do(ctx, func(context.Context) error { return errDown })
			time.Sleep(time.Second + 1)
			func() {
				defer func() { _ = recover() }()
				_ = b.Do(ctx, func(context.Context) error { return nil })
			}()
			if !panicked {
				t.Fatal("the callback did not run")
			}
			if err := b.Do(ctx, func(context.Context) error { return nil }); errors.Is(err, breaker.ErrTooManyProbes) {
				t.Fatalf("engine %v: the next call: %v; the probe slot was kept", engine, err)
			}
		})
	}
}

// TestConsecutiveRunAcrossWindows: a run of failures in a row trips on
// both engines even when it spans more than the rate window (gobreaker
// clears its own run when its window rolls over).
func TestConsecutiveRunAcrossWindows(t *testing.T) {
	for _, engine := range []breaker.Engine{breaker.EngineNative, breaker.EngineGobreaker} {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			b := mustNew(t, breaker.Settings{Engine: engine, ConsecutiveFailures: 3, FailureRate: 1, MinCalls: 100, Window: time.Second})
			_ = b.Do(ctx, func(context.Context) error { return errDown })
			_ = b.Do(ctx, func(context.Context) error { return errDown })
			time.Sleep(2 * time.Second)
			_ = b.Do(ctx, func(context.Context) error { return errDown })
			if st := b.State(); st != breaker.StateOpen {
				t.Errorf("engine %v: 3 failures in a row over 2 s: %v, want open", engine, st)
			}
		})
	}
}

// TestCallbackPanicCounted: the call a panicking OnStateChange stopped is
// counted, as neutral, on both engines.
func TestCallbackPanicCounted(t *testing.T) {
	for _, engine := range []breaker.Engine{breaker.EngineNative, breaker.EngineGobreaker} {
		synctest.Test(t, func(t *testing.T) {
			b := mustNew(t, breaker.Settings{Engine: engine, ConsecutiveFailures: 1, HalfOpenProbes: 1, OpenTimeout: time.Second,
				OnStateChange: func(_, to breaker.State) {
					if to == breaker.StateHalfOpen {
						panic("boom")
					}
				}})
			_ = b.Do(context.Background(), func(context.Context) error { return errDown })
			time.Sleep(2 * time.Second)
			func() {
				defer func() { _ = recover() }()
				_, _ = b.Allow(context.Background())
			}()
			if c := b.Counts(); c.Requests != 2 || c.Neutral != 1 {
				t.Errorf("engine %v: counts %+v, want 2 requests, 1 neutral", engine, c)
			}
		})
	}
}
