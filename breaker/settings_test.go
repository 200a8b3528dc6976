package breaker_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/sony/gobreaker/v2"
)

func TestInvalidSettings(t *testing.T) {
	for _, tc := range []struct {
		field string
		s     breaker.Settings
	}{
		{"ConsecutiveFailures", breaker.Settings{ConsecutiveFailures: -1}},
		{"FailureRate", breaker.Settings{FailureRate: 1.5}},
		{"FailureRate", breaker.Settings{FailureRate: -0.1}},
		{"FailureRate", breaker.Settings{FailureRate: math.NaN()}},
		{"FailureRate", breaker.Settings{MinCalls: 5}},
		{"Window", breaker.Settings{FailureRate: 0.5, Window: -time.Second}},
		{"Window", breaker.Settings{ConsecutiveFailures: 3, Window: time.Second}},
		{"Window", breaker.Settings{FailureRate: 0.5, Window: 5}},
		{"WindowCalls", breaker.Settings{FailureRate: 0.5, WindowCalls: -1}},
		{"WindowCalls", breaker.Settings{FailureRate: 0.5, Window: time.Second, WindowCalls: 10}},
		{"WindowCalls", breaker.Settings{ConsecutiveFailures: 3, WindowCalls: 10}},
		{"MinCalls", breaker.Settings{FailureRate: 0.5, MinCalls: -1}},
		{"MinCalls", breaker.Settings{FailureRate: 0.5, WindowCalls: 10, MinCalls: 11}},
		{"MinCalls", breaker.Settings{ConsecutiveFailures: 3, MinCalls: 11}},
		{"SlowCall", breaker.Settings{SlowCall: -time.Second, SlowCallRate: 0.5}},
		{"SlowCall", breaker.Settings{SlowCallRate: 0.5}},
		{"SlowCallRate", breaker.Settings{SlowCall: time.Second}},
		{"SlowCallRate", breaker.Settings{SlowCall: time.Second, SlowCallRate: 2}},
		{"OpenTimeout", breaker.Settings{OpenTimeout: -time.Second}},
		{"MaxOpenTimeout", breaker.Settings{MaxOpenTimeout: -time.Second}},
		{"MaxOpenTimeout", breaker.Settings{OpenTimeout: time.Minute, MaxOpenTimeout: time.Second}},
		{"HalfOpenProbes", breaker.Settings{HalfOpenProbes: -1}},
		{"HalfOpenSuccesses", breaker.Settings{HalfOpenSuccesses: -1}},
		{"HalfOpenSuccesses", breaker.Settings{HalfOpenProbes: 2, HalfOpenSuccesses: 3}},
		{"SkipHalfOpen", breaker.Settings{SkipHalfOpen: true, HalfOpenProbes: 3}},
		{"Engine", breaker.Settings{Engine: 7}},
		{"WindowCalls", breaker.Settings{FailureRate: 0.5, WindowCalls: 10, Engine: breaker.EngineGobreaker}},
		{"SlowCall", breaker.Settings{SlowCall: time.Second, SlowCallRate: 0.5, Engine: breaker.EngineGobreaker}},
		{"MaxOpenTimeout", breaker.Settings{MaxOpenTimeout: time.Hour, Engine: breaker.EngineGobreaker}},
		{"SkipHalfOpen", breaker.Settings{SkipHalfOpen: true, Engine: breaker.EngineGobreaker}},
		{"HalfOpenSuccesses", breaker.Settings{HalfOpenProbes: 5, HalfOpenSuccesses: 3, Engine: breaker.EngineGobreaker}},
	} {
		b, err := breaker.New(tc.s)
		var se *breaker.SettingsError
		if b != nil || !errors.As(err, &se) || se.Field != tc.field || !strings.Contains(err.Error(), "Settings."+tc.field) {
			t.Errorf("New(%+v) = %v, %v; want a SettingsError naming %s", tc.s, b, err, tc.field)
		}
	}
}

func TestDefaults(t *testing.T) {
	b, err := breaker.New(breaker.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	got := b.Settings()
	if got.ConsecutiveFailures != 10 || got.FailureRate != 0.5 || got.Window != 10*time.Second ||
		got.MinCalls != 20 || got.OpenTimeout != 10*time.Second || got.HalfOpenProbes != 3 || got.HalfOpenSuccesses != 3 {
		t.Errorf("zero Settings gave %+v, want the documented defaults", got)
	}
	if got, want := b.String(), "breaker(10 consecutive or 50% of 10s, open 10s, 3 probes)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	cw, _ := breaker.New(breaker.Settings{FailureRate: 0.1, WindowCalls: 50})
	if cw.Settings().MinCalls != 50 {
		t.Errorf("count window MinCalls default = %d, want WindowCalls", cw.Settings().MinCalls)
	}
}

// TestString: String shows the trip rules, the open stay (and how far it
// grows) and the probes (k of N, or none with SkipHalfOpen).
func TestString(t *testing.T) {
	adapted, _ := breaker.FromGobreaker(gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{}))
	for _, tc := range []struct {
		b    *breaker.Breaker
		want string
	}{
		{mustNew(t, breaker.Settings{ConsecutiveFailures: 5}), "breaker(5 consecutive, open 10s, 3 probes)"},
		{mustNew(t, breaker.Settings{ConsecutiveFailures: 5, Engine: breaker.EngineGobreaker}), "breaker(5 consecutive, open 10s, 3 probes)"},
		{mustNew(t, breaker.Settings{Name: "payments", ConsecutiveFailures: 5, OpenTimeout: 5 * time.Second, MaxOpenTimeout: 30 * time.Second}),
			"breaker payments(5 consecutive, open 5s→30s, 3 probes)"},
		{mustNew(t, breaker.Settings{ConsecutiveFailures: 5, MaxOpenTimeout: 10 * time.Second}), "breaker(5 consecutive, open 10s, 3 probes)"},
		{mustNew(t, breaker.Settings{ConsecutiveFailures: 5, HalfOpenProbes: 3, HalfOpenSuccesses: 2}), "breaker(5 consecutive, open 10s, 2 of 3 probes)"},
		{mustNew(t, breaker.Settings{ConsecutiveFailures: 5, HalfOpenProbes: 1}), "breaker(5 consecutive, open 10s, 1 probe)"},
		{mustNew(t, breaker.Settings{FailureRate: 0.1, WindowCalls: 50, OpenTimeout: time.Second, SkipHalfOpen: true}),
			"breaker(10% of 50 calls, open 1s, no half-open)"},
		{mustNew(t, breaker.Settings{SlowCall: time.Second, SlowCallRate: 0.5, Window: time.Minute, OpenTimeout: time.Second, MaxOpenTimeout: time.Minute, HalfOpenProbes: 10, HalfOpenSuccesses: 7}),
			"breaker(50% slower than 1s of 1m0s, open 1s→1m0s, 7 of 10 probes)"},
		{adapted, "breaker(gobreaker)"},
		{&breaker.Breaker{}, "breaker(zero value: make one with breaker.New)"},
	} {
		if got := tc.b.String(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestFromGobreakerNil(t *testing.T) {
	if b, err := breaker.FromGobreaker(nil); b != nil || err == nil {
		t.Errorf("FromGobreaker(nil) = %v, %v; want an error", b, err)
	}
}

// TestSuccessPathAllocatesNothing: Do and Allow/Done in closed, on the
// default settings (a time window) and a count window.
func TestSuccessPathAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	call := func(context.Context) error { return nil }
	for _, s := range []breaker.Settings{{}, {ConsecutiveFailures: 5}, {FailureRate: 0.1, WindowCalls: 50}} {
		b, _ := breaker.New(s)
		if n := testing.AllocsPerRun(1000, func() { _ = b.Do(ctx, call) }); n != 0 {
			t.Errorf("%v: Do allocates %v", b, n)
		}
		if n := testing.AllocsPerRun(1000, func() {
			p, _ := b.Allow(ctx)
			p.Done(nil)
		}); n != 0 {
			t.Errorf("%v: Allow/Done allocates %v", b, n)
		}
	}
}

// TestZeroBreaker: a zero Breaker admits nothing and says how to make one;
// nothing panics.
func TestZeroBreaker(t *testing.T) {
	var b breaker.Breaker
	called := false
	err := b.Do(context.Background(), func(context.Context) error { called = true; return nil })
	_, aerr := b.Allow(context.Background())
	for _, e := range []error{err, aerr} {
		if e == nil || called || !strings.Contains(e.Error(), "breaker.New") {
			t.Errorf("zero Breaker: %v, called %t; want an error pointing to breaker.New", e, called)
		}
	}
	if st, c := b.State(), b.Counts(); st != breaker.StateOpen || c.Requests != 0 {
		t.Errorf("zero Breaker: state %v, counts %+v", st, c)
	}
}

// wide returns 1<<32 + d as an int, and skips the test where an int
// cannot hold it.
func wide(t *testing.T, d int) int {
	t.Helper()
	if strconv.IntSize < 64 {
		t.Skip("int has 32 bits")
	}
	one := uint64(1)
	return int(one<<32) + d
}

// TestGobreakerRefusesWideCounts: with EngineGobreaker, New refuses by
// name every count that gobreaker's (or the engine's own) uint32 counters
// cannot hold, instead of cutting it to its low 32 bits (1<<32+1 tripped
// after 1 failure, 1<<32 turned the rule off).
func TestGobreakerRefusesWideCounts(t *testing.T) {
	for _, tc := range []struct {
		field string
		s     breaker.Settings
	}{
		{"ConsecutiveFailures", breaker.Settings{ConsecutiveFailures: wide(t, 1)}},
		{"ConsecutiveFailures", breaker.Settings{ConsecutiveFailures: wide(t, 0)}},
		{"HalfOpenProbes", breaker.Settings{ConsecutiveFailures: 1, HalfOpenProbes: wide(t, 1)}},
		{"MinCalls", breaker.Settings{FailureRate: 0.5, Window: time.Second, MinCalls: wide(t, 0)}},
	} {
		tc.s.Engine = breaker.EngineGobreaker
		b, err := breaker.New(tc.s)
		var se *breaker.SettingsError
		if b != nil || !errors.As(err, &se) || se.Field != tc.field {
			t.Errorf("New(%+v) = %v, %v; want a SettingsError naming %s", tc.s, b, err, tc.field)
		}
	}
	// The largest values that fit are kept.
	const most = math.MaxUint32
	for _, s := range []breaker.Settings{
		{ConsecutiveFailures: most, HalfOpenProbes: most},
		{FailureRate: 0.5, Window: time.Second, MinCalls: most},
	} {
		s.Engine = breaker.EngineGobreaker
		if _, err := breaker.New(s); err != nil {
			t.Errorf("New(%+v): got %v, want no error", s, err)
		}
	}
}

// TestNativeKeepsWideCounts: the native engine takes counts above 32 bits
// as they are: it does not trip, or close, early.
func TestNativeKeepsWideCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		for _, s := range []breaker.Settings{
			{ConsecutiveFailures: wide(t, 1)},
			{ConsecutiveFailures: wide(t, 0)},
			{FailureRate: 0.5, Window: time.Second, MinCalls: wide(t, 1)},
		} {
			b := mustNew(t, s)
			for range 10 {
				_ = b.Do(ctx, fail)
			}
			if st := b.State(); st != breaker.StateClosed {
				t.Errorf("%+v: state %v after 10 failures, want closed", s, st)
			}
		}
		b := mustNew(t, breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenProbes: wide(t, 1)})
		_ = b.Do(ctx, fail)
		time.Sleep(2 * time.Second)
		for range 10 {
			_ = b.Do(ctx, ok)
		}
		if st := b.State(); st != breaker.StateHalfOpen {
			t.Errorf("HalfOpenProbes 1<<32+1: state %v after 10 successful probes, want half-open", st)
		}
	})
}

// TestAttemptFailureRate: the rate of attempts at which the requests of a
// retry around the breaker fail at the share asked for.
func TestAttemptFailureRate(t *testing.T) {
	for _, tc := range []struct {
		req      float64
		attempts int
		want     float64
	}{{0.5, 1, 0.5}, {0.5, 2, 0.71}, {0.5, 3, 0.79}, {0.5, 5, 0.87}, {0.25, 2, 0.5}, {0.5, 0, 0.5}} {
		if got := breaker.AttemptFailureRate(tc.req, tc.attempts); got != tc.want {
			t.Errorf("AttemptFailureRate(%g, %d) = %g, want %g", tc.req, tc.attempts, got, tc.want)
		}
	}
}
