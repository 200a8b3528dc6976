package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
)

func fail(context.Context) error { return errDown }
func ok(context.Context) error   { return nil }

func mustNew(t *testing.T, s breaker.Settings) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOpenTimeoutGrowth checks SEEDS B's growing cool-down: 30 s, 60 s,
// 120 s, 240 s, then the 300 s cap, each stay ending strictly after its
// length; a close resets it to 30 s.
func TestOpenTimeoutGrowth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := mustNew(t, breaker.Settings{
			ConsecutiveFailures: 1,
			OpenTimeout:         30 * time.Second,
			MaxOpenTimeout:      300 * time.Second,
			HalfOpenProbes:      1,
		})
		_ = b.Do(ctx, fail)
		for i, stay := range []time.Duration{30, 60, 120, 240, 300, 300} {
			stay *= time.Second
			time.Sleep(stay)
			if got := b.State(); got != breaker.StateOpen {
				t.Fatalf("stay %d: state %v at exactly %v, want open", i, got, stay)
			}
			time.Sleep(time.Nanosecond)
			if got := b.State(); got != breaker.StateHalfOpen {
				t.Fatalf("stay %d: state %v just after %v, want half-open", i, got, stay)
			}
			_ = b.Do(ctx, fail) // the probe fails: open again, for longer
		}
		time.Sleep(300*time.Second + time.Nanosecond)
		if err := b.Do(ctx, ok); err != nil || b.State() != breaker.StateClosed {
			t.Fatalf("probe: %v, state %v; want closed", err, b.State())
		}
		_ = b.Do(ctx, fail)
		time.Sleep(30 * time.Second)
		if b.State() != breaker.StateOpen {
			t.Fatal("want open at 30 s after a close reset the stay")
		}
		time.Sleep(time.Nanosecond)
		if b.State() != breaker.StateHalfOpen {
			t.Fatal("want half-open just after 30 s: the close reset the stay")
		}
	})
}

// TestOpenTimeoutGrowthSkipHalfOpen: with SkipHalfOpen, the close at the
// end of a stay is provisional. Under a downstream that keeps failing the
// stay grows 1 s, 2 s, 4 s, then stays at the 4 s cap; after the breaker
// has stayed closed as long as the last stay it is 1 s again, and a trip
// sooner than the last stay's length after a close doubles it.
func TestOpenTimeoutGrowthSkipHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := mustNew(t, breaker.Settings{
			ConsecutiveFailures: 1,
			OpenTimeout:         time.Second,
			MaxOpenTimeout:      4 * time.Second,
			SkipHalfOpen:        true,
		})
		// stay trips the breaker with a failure and checks that it stays
		// open exactly want, then closes.
		stay := func(step string, want time.Duration) {
			t.Helper()
			if err := b.Do(ctx, fail); !errors.Is(err, errDown) {
				t.Fatalf("%s: the call that trips: got %v, want the downstream's error", step, err)
			}
			time.Sleep(want)
			if got := b.State(); got != breaker.StateOpen {
				t.Fatalf("%s: state %v at %v, want open for %v", step, got, want, want)
			}
			time.Sleep(time.Nanosecond)
			if got := b.State(); got != breaker.StateClosed {
				t.Fatalf("%s: state %v just after %v, want closed: the stay was shorter or longer than %v", step, got, want, want)
			}
		}
		for i, want := range []time.Duration{1, 2, 4, 4} {
			stay(fmt.Sprintf("trip %d, failing", i+1), want*time.Second)
		}
		time.Sleep(4 * time.Second) // healthy, closed as long as the last stay
		stay("after 4 s closed", time.Second)
		time.Sleep(999 * time.Millisecond) // closed for less than the last stay
		stay("999 ms after a 1 s stay", 2*time.Second)
		for range 19 { // 1.9 s of successes: still less than 2 s
			time.Sleep(100 * time.Millisecond)
			_ = b.Do(ctx, ok)
		}
		stay("1.9 s after a 2 s stay", 4*time.Second)
	})
}

// TestCountWindowSkipHalfOpen is SEEDS C.4's breaker: the last 50 calls,
// ≥ 10 % failures opens, open 1 s, then closed at once with the window
// cleared.
func TestCountWindowSkipHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var events []string
		b := mustNew(t, breaker.Settings{
			FailureRate:   0.1,
			WindowCalls:   50,
			OpenTimeout:   time.Second,
			SkipHalfOpen:  true,
			OnStateChange: func(from, to breaker.State) { events = append(events, from.String()+"→"+to.String()) },
		})
		// 4 failures in 50 calls: 8 %, stays closed.
		for i := range 50 {
			if i%12 == 0 && i < 48 {
				_ = b.Do(ctx, fail)
			} else {
				_ = b.Do(ctx, ok)
			}
		}
		if b.State() != breaker.StateClosed {
			t.Fatalf("state %v after 4/50 failures, want closed", b.State())
		}
		// The first failure slides out as a 5th failure comes in: still 4.
		_ = b.Do(ctx, fail)
		if b.State() != breaker.StateClosed {
			t.Fatalf("state %v with 4 failures in the last 50, want closed", b.State())
		}
		_ = b.Do(ctx, fail) // 5 of the last 50: 10 %
		if b.State() != breaker.StateOpen {
			t.Fatalf("state %v with 5 failures in the last 50, want open", b.State())
		}
		if err := b.Do(ctx, ok); !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("call while open: %v, want ErrOpen", err)
		}
		time.Sleep(time.Second + time.Nanosecond)
		// Closed with the window cleared: 5 failures in a row do not trip,
		// since the window needs 50 calls first.
		for range 5 {
			if err := b.Do(ctx, fail); !errors.Is(err, errDown) {
				t.Fatalf("call after the open stay: %v, want the downstream's error", err)
			}
		}
		if b.State() != breaker.StateClosed {
			t.Fatalf("state %v, want closed (window cleared)", b.State())
		}
		want := []string{"closed→open", "open→closed"}
		if len(events) != 2 || events[0] != want[0] || events[1] != want[1] {
			t.Fatalf("transitions %v, want %v", events, want)
		}
	})
}

// TestTimeWindowRate checks the failure rate over a sliding time window:
// failures older than the window no longer count.
func TestTimeWindowRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := mustNew(t, breaker.Settings{FailureRate: 0.5, Window: 10 * time.Second, MinCalls: 4})
		_ = b.Do(ctx, fail)
		_ = b.Do(ctx, fail)
		_ = b.Do(ctx, ok)
		time.Sleep(11 * time.Second) // both failures leave the window
		_ = b.Do(ctx, ok)
		_ = b.Do(ctx, ok)
		_ = b.Do(ctx, ok)
		_ = b.Do(ctx, fail) // 1 of 4
		if b.State() != breaker.StateClosed {
			t.Fatalf("state %v at 1/4 failures in the window, want closed", b.State())
		}
		time.Sleep(time.Second)
		_ = b.Do(ctx, fail) // 2 of 5
		if b.State() != breaker.StateClosed {
			t.Fatalf("state %v at 2/5, want closed", b.State())
		}
		_ = b.Do(ctx, fail) // 3 of 6: 50 %
		if b.State() != breaker.StateOpen {
			t.Fatalf("state %v at 3/6, want open", b.State())
		}
	})
}

// TestMinCalls: a rate cannot trip before the window holds MinCalls calls.
func TestMinCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := mustNew(t, breaker.Settings{FailureRate: 0.5, Window: time.Minute, MinCalls: 10})
		for range 9 {
			_ = b.Do(ctx, fail)
		}
		if b.State() != breaker.StateClosed {
			t.Fatalf("state %v after 9 calls with MinCalls 10, want closed", b.State())
		}
		_ = b.Do(ctx, fail)
		if b.State() != breaker.StateOpen {
			t.Fatalf("state %v after 10 failures, want open", b.State())
		}
	})
}

// TestSlowCallRate: successes slower than SlowCall trip the breaker at
// SlowCallRate.
func TestSlowCallRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := mustNew(t, breaker.Settings{SlowCall: 100 * time.Millisecond, SlowCallRate: 0.5, WindowCalls: 4})
		slow := func(context.Context) error { time.Sleep(200 * time.Millisecond); return nil }
		fast := func(context.Context) error { time.Sleep(50 * time.Millisecond); return nil }
		_ = b.Do(ctx, slow)
		_ = b.Do(ctx, fast)
		_ = b.Do(ctx, fast)
		_ = b.Do(ctx, fast) // 1 of 4 slow
		if b.State() != breaker.StateClosed {
			t.Fatalf("state %v at 1/4 slow, want closed", b.State())
		}
		_ = b.Do(ctx, slow) // the first slow one slid out: 1 of 4
		if b.State() != breaker.StateClosed {
			t.Fatalf("state %v at 1/4 slow, want closed", b.State())
		}
		_ = b.Do(ctx, slow) // 2 of 4
		if b.State() != breaker.StateOpen {
			t.Fatalf("state %v at 2/4 slow, want open", b.State())
		}
		if c := b.Counts(); c.Failures != 0 || c.Successes != 6 {
			t.Fatalf("counts %+v: slow calls are successes", c)
		}
	})
}

// TestDecoupledHalfOpen: 5 probes, 3 to close. Two failures leave 3
// reachable; the third failure makes it unreachable and re-opens.
func TestDecoupledHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		newOpen := func() *breaker.Breaker {
			b := mustNew(t, breaker.Settings{ConsecutiveFailures: 1, HalfOpenProbes: 5, HalfOpenSuccesses: 3, OpenTimeout: time.Second})
			_ = b.Do(ctx, fail)
			time.Sleep(time.Second + time.Nanosecond)
			return b
		}
		b := newOpen()
		for _, call := range []func(context.Context) error{fail, ok, fail, ok} {
			_ = b.Do(ctx, call)
		}
		if b.State() != breaker.StateHalfOpen {
			t.Fatalf("state %v after 2 failures and 2 successes of 5/3, want half-open", b.State())
		}
		_ = b.Do(ctx, ok)
		if b.State() != breaker.StateClosed {
			t.Fatalf("state %v after the 3rd success, want closed", b.State())
		}
		b = newOpen()
		for _, call := range []func(context.Context) error{fail, fail, ok, fail} {
			_ = b.Do(ctx, call)
		}
		if b.State() != breaker.StateOpen {
			t.Fatalf("state %v after 3 failures of 5/3, want open", b.State())
		}
	})
}

// TestHalfOpenQuota: probes beyond the quota get ErrTooManyProbes, which
// also matches ErrOpen; a probe whose caller gave up gives its slot back.
func TestHalfOpenQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := mustNew(t, breaker.Settings{ConsecutiveFailures: 1, HalfOpenProbes: 2, OpenTimeout: time.Second})
		_ = b.Do(ctx, fail)
		if err := b.Do(ctx, ok); !errors.Is(err, breaker.ErrOpen) || errors.Is(err, breaker.ErrTooManyProbes) {
			t.Fatalf("got %v, want ErrOpen, not ErrTooManyProbes", err)
		}
		time.Sleep(2 * time.Second)
		p1, err1 := b.Allow(ctx)
		cctx, cancel := context.WithCancel(ctx)
		p2, err2 := b.Allow(cctx)
		_, err3 := b.Allow(ctx)
		if err1 != nil || err2 != nil || !errors.Is(err3, breaker.ErrTooManyProbes) || !errors.Is(err3, breaker.ErrOpen) {
			t.Fatalf("got %v, %v, %v; want nil, nil, ErrTooManyProbes matching ErrOpen", err1, err2, err3)
		}
		cancel()
		p2.Done(context.Canceled) // the caller's own cancellation: neutral
		p3, err := b.Allow(ctx)
		if err != nil {
			t.Fatalf("after a neutral probe: %v, want its slot given back", err)
		}
		p1.Done(nil)
		p3.Done(nil)
		if c := b.Counts(); b.State() != breaker.StateClosed || c.Neutral != 1 || c.RejectedProbes != 1 {
			t.Fatalf("state %v, counts %+v; want closed, 1 neutral, 1 rejected probe", b.State(), c)
		}
	})
}

// TestCallerCancellationIsNeutral: the caller's own cancellation never trips
// the breaker, whatever IsFailure says.
func TestCallerCancellationIsNeutral(t *testing.T) {
	b := mustNew(t, breaker.Settings{ConsecutiveFailures: 1, IsFailure: func(error) bool { return true }})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 10 {
		_ = b.Do(ctx, func(ctx context.Context) error { return ctx.Err() })
	}
	if b.State() != breaker.StateClosed || b.Counts().Neutral != 10 {
		t.Fatalf("state %v, counts %+v; want closed with 10 neutral", b.State(), b.Counts())
	}
	excluded := mustNew(t, breaker.Settings{ConsecutiveFailures: 1, IsExcluded: func(err error) bool { return err == errExcluded }})
	_ = excluded.Do(context.Background(), func(context.Context) error { return errExcluded })
	notFailure := mustNew(t, breaker.Settings{ConsecutiveFailures: 1, IsFailure: func(err error) bool { return err != errExcluded }})
	_ = notFailure.Do(context.Background(), func(context.Context) error { return errExcluded })
	if excluded.State() != breaker.StateClosed || notFailure.State() != breaker.StateClosed {
		t.Fatal("IsExcluded or IsFailure ignored")
	}
	if c := notFailure.Counts(); c.Successes != 1 {
		t.Fatalf("IsFailure false: counts %+v, want 1 success", c)
	}
}

// TestPanicCountsAsFailure: a panicking call is a failure and the panic goes on.
func TestPanicCountsAsFailure(t *testing.T) {
	b := mustNew(t, breaker.Settings{ConsecutiveFailures: 1})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_ = b.Do(context.Background(), func(context.Context) error { panic("boom") })
	}()
	if b.State() != breaker.StateOpen {
		t.Fatalf("state %v, want open", b.State())
	}
}

// TestOnStateChangeMayReadBreaker: the callback runs with no lock held, so it
// may call State and Counts (gobreaker issue #37 deadlocks here).
func TestOnStateChangeMayReadBreaker(t *testing.T) {
	for _, engine := range []breaker.Engine{breaker.EngineNative, breaker.EngineGobreaker} {
		t.Run(engine.String(), func(t *testing.T) {
			var b *breaker.Breaker
			var seen []breaker.State
			b = mustNew(t, breaker.Settings{
				ConsecutiveFailures: 1,
				Engine:              engine,
				OnStateChange: func(from, to breaker.State) {
					seen = append(seen, b.State())
					_ = b.Counts()
				},
			})
			_ = b.Do(context.Background(), fail)
			if len(seen) != 1 || seen[0] != breaker.StateOpen {
				t.Fatalf("callback saw %v, want [open]", seen)
			}
		})
	}
}

// TestNotFailure: an error marked as an answer from a healthy downstream is
// a success for the default classification, and stays visible to errors.Is.
func TestNotFailure(t *testing.T) {
	b := mustNew(t, breaker.Settings{ConsecutiveFailures: 1})
	err := b.Do(context.Background(), func(context.Context) error { return breaker.NotFailure(errExcluded) })
	if !errors.Is(err, errExcluded) || b.State() != breaker.StateClosed || b.Counts().Successes != 1 {
		t.Fatalf("got %v, state %v, counts %+v; want a success", err, b.State(), b.Counts())
	}
	if breaker.NotFailure(nil) != nil {
		t.Fatal("NotFailure(nil) != nil")
	}
}

// TestNeutral: an error marked neutral counts neither way, on both engines,
// even with an IsFailure that would call it a failure; errors.Is sees it.
func TestNeutral(t *testing.T) {
	for _, engine := range []breaker.Engine{breaker.EngineNative, breaker.EngineGobreaker} {
		b := mustNew(t, breaker.Settings{ConsecutiveFailures: 1, Engine: engine, IsFailure: func(error) bool { return true }})
		for range 3 {
			err := b.Do(context.Background(), func(context.Context) error { return breaker.Neutral(errExcluded) })
			if !errors.Is(err, errExcluded) {
				t.Fatalf("got %v, want it to match the wrapped error", err)
			}
		}
		if c := b.Counts(); b.State() != breaker.StateClosed || c.Neutral != 3 || c.Failures+c.Successes != 0 {
			t.Errorf("engine %v: state %v, counts %+v; want 3 neutral calls", engine, b.State(), c)
		}
	}
	if breaker.Neutral(nil) != nil {
		t.Fatal("Neutral(nil) != nil")
	}
}
