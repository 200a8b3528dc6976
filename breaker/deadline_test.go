package breaker_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
)

// hang waits for its caller to give up and returns why, as a client call
// to a hung downstream does.
func hang(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestDeadlineCutSlowCall: on the native engine with SlowCall set, a call
// that the caller's deadline ends after it ran longer than SlowCall counts
// as a slow call, not as neutral: a hung downstream trips SlowCallRate
// though every caller gives up before it answers.
func TestDeadlineCutSlowCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, breaker.Settings{SlowCall: 100 * time.Millisecond, SlowCallRate: 0.5, WindowCalls: 4})
		for i := range 4 {
			if st := b.State(); st != breaker.StateClosed {
				t.Fatalf("state %v after %d hung calls, want closed until the window holds 4 calls", st, i)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			err := b.Do(ctx, hang)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("call %d: got %v, want the caller's deadline", i, err)
			}
		}
		if st := b.State(); st != breaker.StateOpen {
			t.Errorf("state %v after 4 calls cut by the caller's deadline at 150 ms, slow at 100 ms: want open", st)
		}
		if c := b.Counts(); c.SlowUnanswered != 4 || c.Neutral != 0 || c.Successes != 0 || c.Failures != 0 || c.Requests != 4 {
			t.Errorf("counts %+v, want 4 slow unanswered calls of 4 requests", c)
		}
	})
}

// TestDeadlineCutStaysNeutral: what the caller ends otherwise stays
// neutral: a deadline before SlowCall, a plain cancellation, a
// cancellation before a deadline that passed later, a Neutral-marked
// error, a breaker without SlowCall, a probe in half-open.
func TestDeadlineCutStaysNeutral(t *testing.T) {
	const slow = 100 * time.Millisecond
	slowSettings := breaker.Settings{SlowCall: slow, SlowCallRate: 0.5, WindowCalls: 4}
	for _, tc := range []struct {
		name string
		s    breaker.Settings
		ctx  func() (context.Context, context.CancelFunc)
		call func(context.Context) error
	}{
		{"deadline before SlowCall", slowSettings, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), slow/2)
		}, hang},
		{"cancellation", slowSettings, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(2*slow, cancel)
			return ctx, cancel
		}, hang},
		{"cancellation before the deadline", slowSettings, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*slow)
			time.AfterFunc(slow/2, cancel)
			return ctx, cancel
		}, func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(3 * slow) // returns after the deadline passed too
			return ctx.Err()
		}},
		{"Neutral-marked", slowSettings, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 2*slow)
		}, func(ctx context.Context) error { return breaker.Neutral(hang(ctx)) }},
		{"no SlowCall", breaker.Settings{ConsecutiveFailures: 1}, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 2*slow)
		}, hang},
	} {
		synctest.Test(t, func(t *testing.T) {
			b := mustNew(t, tc.s)
			for range 8 {
				ctx, cancel := tc.ctx()
				_ = b.Do(ctx, tc.call)
				cancel()
			}
			if c := b.Counts(); b.State() != breaker.StateClosed || c.Neutral != 8 || c.SlowUnanswered != 0 {
				t.Errorf("%s: state %v, counts %+v; want closed, 8 neutral calls", tc.name, b.State(), c)
			}
		})
	}

	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, breaker.Settings{SlowCall: slow, SlowCallRate: 0.5, WindowCalls: 2, OpenTimeout: time.Second, HalfOpenProbes: 1})
		slowOK := func(context.Context) error { time.Sleep(2 * slow); return nil }
		_ = b.Do(context.Background(), slowOK)
		_ = b.Do(context.Background(), slowOK)
		time.Sleep(2 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 2*slow)
		_ = b.Do(ctx, hang)
		cancel()
		if c := b.Counts(); b.State() != breaker.StateHalfOpen || c.Neutral != 1 {
			t.Errorf("probe cut by its caller's deadline: state %v, counts %+v; want half-open, 1 neutral", b.State(), c)
		}
		if err := b.Do(context.Background(), ok); err != nil {
			t.Errorf("the next probe: got %v, want the slot given back", err)
		}
	})
}
