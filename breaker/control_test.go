package breaker_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
	"github.com/sony/gobreaker/v2"
)

// TestForceOpen: a forced breaker rejects every call with an *OpenError
// that says so, stays open past any open stay (no half-open), is seen in
// State, Override and the state changes, and Reset closes it. A retry
// around it gives up at once, even with RetryWhenOpen: waiting will not
// help.
func TestForceOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var changes []string
		b := must(breaker.New(breaker.Settings{Name: "payments", ConsecutiveFailures: 5, OpenTimeout: time.Second,
			OnStateChange: func(from, to breaker.State) { changes = append(changes, from.String()+">"+to.String()) }}))
		if err := b.ForceOpen(); err != nil {
			t.Fatal(err)
		}
		calls := 0
		call := func(context.Context) error { calls++; return nil }
		time.Sleep(time.Hour)
		err := b.Do(context.Background(), call)
		var oe *breaker.OpenError
		if !errors.As(err, &oe) || !oe.Forced || !oe.Until.IsZero() || !errors.Is(err, breaker.ErrOpen) || calls != 0 || err.Error() != `breaker "payments": forced open` {
			t.Fatalf("after an hour forced open: %v (%+v), %d calls; want a forced *OpenError, no call", err, oe, calls)
		}
		if b.State() != breaker.StateOpen || b.Override() != breaker.OverrideOpen {
			t.Errorf("state %v, override %v; want open, forced", b.State(), b.Override())
		}
		for _, whenOpen := range []bool{false, true} {
			opts := []retry.Option{retry.MaxAttempts(3), retry.Constant(time.Second)}
			if whenOpen {
				opts = append(opts, retry.RetryWhenOpen())
			}
			c := must(chain.New(must(retry.New(opts...)), b))
			start := time.Now()
			if err := c.Do(context.Background(), call); !errors.Is(err, breaker.ErrOpen) || time.Since(start) != 0 {
				t.Errorf("retry (when open %t) around a forced breaker: %v after %v; want ErrOpen at once", whenOpen, err, time.Since(start))
			}
		}
		if err := b.Reset(); err != nil {
			t.Fatal(err)
		}
		if err := b.Do(context.Background(), call); err != nil || calls != 1 || b.State() != breaker.StateClosed || b.Override() != breaker.OverrideNone {
			t.Errorf("after Reset: %v, %d calls, state %v, override %v; want a call through, closed", err, calls, b.State(), b.Override())
		}
		if want := []string{"closed>open", "open>closed"}; len(changes) != 2 || changes[0] != want[0] || changes[1] != want[1] {
			t.Errorf("state changes %v, want %v", changes, want)
		}
	})
}

// TestDisable: a disabled breaker admits every call and counts it, but
// never trips; Reset brings its trip rules back, with a clean count.
func TestDisable(t *testing.T) {
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 5, FailureRate: 0.5, MinCalls: 10}))
	_ = b.Do(context.Background(), func(context.Context) error { return errDown })
	if err := b.Disable(); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		_ = b.Do(context.Background(), func(context.Context) error { return errDown })
	}
	if c := b.Counts(); b.State() != breaker.StateClosed || b.Override() != breaker.OverrideDisabled || c.Failures != 101 || c.Opens != 0 {
		t.Fatalf("disabled after 100 failures: state %v, override %v, counts %+v; want closed, 101 failures counted, no open", b.State(), b.Override(), c)
	}
	if err := b.Reset(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if b.State() != breaker.StateClosed {
			t.Fatalf("open after %d failures since Reset, want 5", i)
		}
		_ = b.Do(context.Background(), func(context.Context) error { return errDown })
	}
	if b.State() != breaker.StateOpen {
		t.Errorf("state %v after 5 failures since Reset, want open", b.State())
	}
}

// TestResetTripped: Reset closes a breaker its rules opened, and the next
// trip's open stay starts again from OpenTimeout (the growth is reset).
func TestResetTripped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Second, MaxOpenTimeout: time.Minute, HalfOpenProbes: 1}))
		fail := func() { _ = b.Do(context.Background(), func(context.Context) error { return errDown }) }
		fail() // open 1s
		time.Sleep(1100 * time.Millisecond)
		fail() // the probe fails: open 2s
		if err := b.Reset(); err != nil || b.State() != breaker.StateClosed {
			t.Fatalf("Reset: %v, state %v", err, b.State())
		}
		fail()
		var oe *breaker.OpenError
		if err := b.Do(context.Background(), func(context.Context) error { return nil }); !errors.As(err, &oe) || oe.Remaining().Round(time.Millisecond) != time.Second {
			t.Errorf("after Reset and a trip: %v; want open for OpenTimeout (1s) again", err)
		}
	})
}

// TestNoManualControlOnGobreaker: a breaker whose state lives in gobreaker
// refuses ForceOpen, Disable and Reset by a named error.
func TestNoManualControlOnGobreaker(t *testing.T) {
	for _, b := range []*breaker.Breaker{
		must(breaker.New(breaker.Settings{Engine: breaker.EngineGobreaker})),
		must(breaker.FromGobreaker(gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{}))),
	} {
		for name, f := range map[string]func() error{"ForceOpen": b.ForceOpen, "Disable": b.Disable, "Reset": b.Reset} {
			if err := f(); !errors.Is(err, breaker.ErrNoManualControl) {
				t.Errorf("%v: %s = %v, want ErrNoManualControl", b, name, err)
			}
		}
		if b.Override() != breaker.OverrideNone || b.State() != breaker.StateClosed {
			t.Errorf("%v: override %v, state %v after refused controls", b, b.Override(), b.State())
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
