package breaker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/bridge"
)

// TestConsecutiveFor: a run of ConsecutiveFailures trips only once it has
// lasted ConsecutiveFor from its first failure; a success ends the run and
// the next failure begins a new one.
func TestConsecutiveFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := mustNew(t, breaker.Settings{ConsecutiveFailures: 3, ConsecutiveFor: 500 * time.Millisecond})
		for range 10 { // 10 in a row within a millisecond: not for 500 ms
			_ = b.Do(ctx, fail)
		}
		if got := b.State(); got != breaker.StateClosed {
			t.Fatalf("after 10 failures at once: %v, want closed", got)
		}
		time.Sleep(499 * time.Millisecond)
		_ = b.Do(ctx, fail)
		if got := b.State(); got != breaker.StateClosed {
			t.Fatalf("a failure 499 ms into the run: %v, want closed", got)
		}
		_ = b.Do(ctx, ok) // ends the run
		time.Sleep(time.Millisecond)
		_ = b.Do(ctx, fail) // a new run begins
		time.Sleep(499 * time.Millisecond)
		_ = b.Do(ctx, fail)
		_ = b.Do(ctx, fail)
		if got := b.State(); got != breaker.StateClosed {
			t.Fatalf("3 failures over 499 ms of a new run: %v, want closed", got)
		}
		time.Sleep(time.Millisecond)
		_ = b.Do(ctx, fail)
		if got := b.State(); got != breaker.StateOpen {
			t.Fatalf("a failure 500 ms into a run of 3: %v, want open", got)
		}
		if got, want := b.String(), "breaker(3 consecutive over 500ms, open 10s, 3 probes)"; got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	})
}

// TestConsecutiveForUnderConcurrency: a downstream failing 70 % of its
// calls at once, 20 callers: ten failures in a row come within
// milliseconds, and the plain rule of 10 opens; over 500 ms, with a
// success every few calls, it never does.
func TestConsecutiveForUnderConcurrency(t *testing.T) {
	for _, tc := range []struct {
		over      time.Duration
		wantOpens bool
	}{{0, true}, {500 * time.Millisecond, false}} {
		synctest.Test(t, func(t *testing.T) {
			b := mustNew(t, breaker.Settings{ConsecutiveFailures: 10, ConsecutiveFor: tc.over, OpenTimeout: time.Second})
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Go(func() {
					for n := range 500 {
						_ = b.Do(context.Background(), func(context.Context) error {
							time.Sleep(2 * time.Millisecond)
							if (n*20+i)%10 < 7 {
								return errDown
							}
							return nil
						})
					}
				})
			}
			wg.Wait()
			if opened := b.Counts().Opens > 0; opened != tc.wantOpens {
				t.Errorf("ConsecutiveFor %v: %d opens, want opens: %t", tc.over, b.Counts().Opens, tc.wantOpens)
			}
		})
	}
}

// TestConsecutiveForSettings: ConsecutiveFor needs a count to time, is
// never negative, and has no gobreaker equivalent.
func TestConsecutiveForSettings(t *testing.T) {
	for _, s := range []breaker.Settings{
		{ConsecutiveFailures: 5, ConsecutiveFor: -time.Second},
		{FailureRate: 0.5, ConsecutiveFor: time.Second},
		{ConsecutiveFailures: 5, ConsecutiveFor: time.Second, Engine: breaker.EngineGobreaker},
	} {
		_, err := breaker.New(s)
		var se *breaker.SettingsError
		if !errors.As(err, &se) || se.Field != "ConsecutiveFor" {
			t.Errorf("New(%+v): %v, want a SettingsError naming ConsecutiveFor", s, err)
		}
	}
}

// TestCondemn: an adaptive attempt timeout inside the breaker whose scout,
// begun at some instant, found the attempts it cut to be hangs
// (bridge.BreakerCondemn) opens the breaker on a run of failures begun by
// then, without waiting out ConsecutiveFor; a run begun later is other
// failures, and waits.
func TestCondemn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := mustNew(t, breaker.Settings{ConsecutiveFailures: 3, ConsecutiveFor: time.Hour})
		_ = b.Do(ctx, fail)
		_ = b.Do(ctx, fail)
		bridge.BreakerCondemn(b, time.Now()) // a run of 2: not yet
		if got := b.State(); got != breaker.StateClosed {
			t.Fatalf("condemned with a run of 2 of 3: %v, want closed", got)
		}
		time.Sleep(time.Second)
		scout := time.Now()
		_ = b.Do(ctx, ok) // ends the run
		time.Sleep(time.Second)
		_ = b.Do(ctx, fail)
		_ = b.Do(ctx, fail)
		_ = b.Do(ctx, fail)
		bridge.BreakerCondemn(b, scout) // the run began after the scout
		if got := b.State(); got != breaker.StateClosed {
			t.Fatalf("condemned by a scout older than the run: %v, want closed (ConsecutiveFor 1h)", got)
		}
		bridge.BreakerCondemn(b, time.Now())
		if got := b.State(); got != breaker.StateOpen {
			t.Fatalf("condemned by a scout begun after the run of 3 began: %v, want open", got)
		}
	})
}
