package breaker_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/sony/gobreaker/v2"
)

// openError returns err as an *OpenError, or fails the test.
func openError(t *testing.T, err error) *breaker.OpenError {
	t.Helper()
	var oe *breaker.OpenError
	if !errors.As(err, &oe) {
		t.Fatalf("got %v (%T), want a *breaker.OpenError", err, err)
	}
	return oe
}

// TestOpenError: on both engines, a rejection in open is an *OpenError
// naming the breaker, with the first instant it admits a call again, one
// per open stay, matching ErrOpen but not ErrTooManyProbes; a rejection for
// the half-open probe quota has Probes set, a zero Until, and matches both.
func TestOpenError(t *testing.T) {
	for _, engine := range []breaker.Engine{breaker.EngineNative, breaker.EngineGobreaker} {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			b := mustNew(t, breaker.Settings{Name: "payments", Engine: engine, ConsecutiveFailures: 1, OpenTimeout: 4 * time.Second, HalfOpenProbes: 1})
			tripped := time.Now()
			_ = b.Do(ctx, fail)
			time.Sleep(1800 * time.Millisecond)

			err := b.Do(ctx, ok)
			oe := openError(t, err)
			if want := tripped.Add(4*time.Second + 1); oe.Name != "payments" || !oe.Until.Equal(want) || oe.Probes {
				t.Errorf("engine %v: got %+v, want Name payments, Until %v, Probes false", engine, oe, want)
			}
			if !errors.Is(err, breaker.ErrOpen) || errors.Is(err, breaker.ErrTooManyProbes) {
				t.Errorf("engine %v: errors.Is ErrOpen %t, ErrTooManyProbes %t; want true, false", engine,
					errors.Is(err, breaker.ErrOpen), errors.Is(err, breaker.ErrTooManyProbes))
			}
			if got, want := oe.Remaining(), 2200*time.Millisecond+1; got != want {
				t.Errorf("engine %v: Remaining() = %v, want %v", engine, got, want)
			}
			if got, want := oe.Error(), `breaker "payments": open, 2.2s left`; got != want {
				t.Errorf("engine %v: Error() = %q, want %q", engine, got, want)
			}
			if again := openError(t, b.Do(ctx, ok)); again != oe {
				t.Errorf("engine %v: a second rejection of the same stay got a new error %p, want %p", engine, again, oe)
			}

			time.Sleep(2200*time.Millisecond + 1) // the stay is over: half-open
			if got := oe.Remaining(); got != 0 {
				t.Errorf("engine %v: Remaining() after the stay = %v, want 0", engine, got)
			}
			probe, err := b.Allow(ctx)
			if err != nil {
				t.Fatalf("engine %v: the first probe: got %v, want it admitted", engine, err)
			}
			err = b.Do(ctx, ok)
			pe := openError(t, err)
			if pe.Name != "payments" || !pe.Until.IsZero() || !pe.Probes || pe.Remaining() != 0 {
				t.Errorf("engine %v: quota rejection %+v, want Name payments, zero Until, Probes", engine, pe)
			}
			if !errors.Is(err, breaker.ErrOpen) || !errors.Is(err, breaker.ErrTooManyProbes) {
				t.Errorf("engine %v: quota rejection: errors.Is ErrOpen %t, ErrTooManyProbes %t; want both", engine,
					errors.Is(err, breaker.ErrOpen), errors.Is(err, breaker.ErrTooManyProbes))
			}
			if got, want := pe.Error(), `breaker "payments": open (half-open probe quota used up)`; got != want {
				t.Errorf("engine %v: Error() = %q, want %q", engine, got, want)
			}
			probe.Done(errDown) // open again: a new stay, a new error

			time.Sleep(time.Second)
			next := openError(t, b.Do(ctx, ok))
			if next == oe || !next.Until.After(oe.Until) {
				t.Errorf("engine %v: the next stay's error %+v, want a new one after %v", engine, next, oe.Until)
			}
		})
	}
}

// TestOpenErrorMessages: the message of an unnamed breaker, and of one
// whose end is unknown.
func TestOpenErrorMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			e    breaker.OpenError
			want string
		}{
			{breaker.OpenError{Until: time.Now().Add(4 * time.Second)}, "breaker: open, 4s left"},
			{breaker.OpenError{Until: time.Now().Add(250 * time.Millisecond)}, "breaker: open, 250ms left"},
			{breaker.OpenError{Until: time.Now().Add(-time.Second)}, "breaker: open, 0s left"},
			{breaker.OpenError{Name: "a b"}, `breaker "a b": open`},
			{breaker.OpenError{}, "breaker: open"},
			{breaker.OpenError{Probes: true}, "breaker: open (half-open probe quota used up)"},
		} {
			if got := tc.e.Error(); got != tc.want {
				t.Errorf("%+v: Error() = %q, want %q", tc.e, got, tc.want)
			}
		}
	})
}

// TestOpenErrorFromGobreaker: a breaker made by FromGobreaker rejects with
// an *OpenError named after the wrapped breaker, with a zero Until.
func TestOpenErrorFromGobreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b, err := breaker.FromGobreaker(gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{
			Name:        "legacy",
			Timeout:     time.Second,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 1 },
		}))
		if err != nil {
			t.Fatal(err)
		}
		_ = b.Do(ctx, fail)
		err = b.Do(ctx, ok)
		if oe := openError(t, err); oe.Name != "legacy" || !oe.Until.IsZero() || oe.Probes || oe.Error() != `breaker "legacy": open` {
			t.Errorf("got %+v (%q), want Name legacy, zero Until, not Probes", oe, oe.Error())
		}
		time.Sleep(2 * time.Second)
		p, err := b.Allow(ctx)
		if err != nil {
			t.Fatalf("the probe: got %v, want it admitted", err)
		}
		err = b.Do(ctx, ok)
		if oe := openError(t, err); oe.Name != "legacy" || !oe.Probes || !errors.Is(err, breaker.ErrTooManyProbes) {
			t.Errorf("quota rejection %+v, want Name legacy, Probes, matching ErrTooManyProbes", oe)
		}
		p.Done(nil)
	})
}

// TestRejectionAllocatesNothing: rejections in open allocate nothing, on
// both engines and for an adapted gobreaker.
func TestRejectionAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	adapted, _ := breaker.FromGobreaker(gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{
		Timeout:     time.Hour,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 1 },
	}))
	for _, b := range []*breaker.Breaker{
		mustNew(t, breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}),
		mustNew(t, breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour, Engine: breaker.EngineGobreaker}),
		adapted,
	} {
		_ = b.Do(ctx, fail)
		if n := testing.AllocsPerRun(1000, func() { _ = b.Do(ctx, ok) }); n != 0 {
			t.Errorf("%v (%v): a rejection allocates %v, want 0", b, b.Settings().Engine, n)
		}
	}
}
