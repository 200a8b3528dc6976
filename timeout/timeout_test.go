package timeout_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/timeout"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func hang(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }

func TestTimeoutFires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := timeout.New(300 * time.Millisecond)
		start := time.Now()
		var cause error
		err := p.Do(context.Background(), func(ctx context.Context) error {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ctx.Err()
		})
		var te *timeout.Error
		if !errors.As(err, &te) || te.Timeout != 300*time.Millisecond || !errors.Is(err, timeout.ErrTimeout) ||
			!errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 300*time.Millisecond {
			t.Errorf("got %v after %v, want a timeout.Error at 300ms", err, time.Since(start))
		}
		if !errors.As(cause, &te) {
			t.Errorf("context.Cause = %v, want the policy's *timeout.Error", cause)
		}
	})
}

func TestCallerDeadlineSoonerMakesNoContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := timeout.New(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		err := p.Do(ctx, func(got context.Context) error {
			if got != ctx {
				t.Error("a context was made although the caller's deadline is sooner")
			}
			return hang(got)
		})
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, timeout.ErrTimeout) {
			t.Errorf("got %v, want the caller's own deadline, not a timeout of ours", err)
		}
	})
}

func TestCallerCancellationIsNotOurs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := timeout.New(time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(100 * time.Millisecond); cancel() }()
		err := p.Do(ctx, hang)
		if !errors.Is(err, context.Canceled) || timeout.Expired(err) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	})
}

func TestSuccessInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := timeout.New(time.Second)
		err := p.Do(context.Background(), func(ctx context.Context) error { time.Sleep(999 * time.Millisecond); return nil })
		if err != nil {
			t.Errorf("got %v, want nil", err)
		}
	})
}

func TestInvalid(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		opt  timeout.Option
		name string
	}{
		{0, nil, "New(0s)"},
		{time.Second, timeout.Latency(1.5, time.Second), "Latency(1.5"},
		{time.Second, timeout.Latency(0.9, 0), "Latency(0.9, 0s)"},
		{time.Second, timeout.Adaptive(timeout.AdaptiveOptions{Quantile: 2}), "Quantile"},
		{time.Second, timeout.Adaptive(timeout.AdaptiveOptions{Multiplier: 0.5}), "Multiplier"},
		{time.Second, timeout.Adaptive(timeout.AdaptiveOptions{Multiplier: math.Inf(1)}), "Multiplier"},
		{time.Second, timeout.Adaptive(timeout.AdaptiveOptions{Multiplier: math.NaN()}), "Multiplier"},
		{time.Second, timeout.Adaptive(timeout.AdaptiveOptions{Min: time.Second, Max: time.Millisecond}), "Max"},
		{time.Second, nil, "nil Option"},
	} {
		var opts []timeout.Option
		if tc.opt != nil || tc.name == "nil Option" {
			opts = append(opts, tc.opt)
		}
		p, err := timeout.New(tc.d, opts...)
		if p != nil || err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s: got %v, %v; want an error naming it", tc.name, p, err)
		}
	}
}

// TestAdaptiveHugeMultiplierClampsToMax: a multiplier whose product passes
// what a time.Duration holds gives Max, not Min.
func TestAdaptiveHugeMultiplierClampsToMax(t *testing.T) {
	for _, maxT := range []time.Duration{time.Hour, math.MaxInt64} {
		synctest.Test(t, func(t *testing.T) {
			p, err := timeout.New(100*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{
				Multiplier: 1e12, Min: 10 * time.Millisecond, Max: maxT, MinSamples: 10,
			}))
			if err != nil {
				t.Fatal(err)
			}
			for range 200 {
				_ = p.Do(context.Background(), func(context.Context) error {
					time.Sleep(20 * time.Millisecond)
					return nil
				})
			}
			if got := p.Timeout(); got != maxT {
				t.Errorf("adaptive timeout %v with a 1e12 multiplier, want Max (%v)", got, maxT)
			}
		})
	}
}

// TestZeroPolicy: a zero Policy runs nothing and says how to make one.
func TestZeroPolicy(t *testing.T) {
	called := false
	err := (&timeout.Policy{}).Do(context.Background(), func(context.Context) error { called = true; return nil })
	if err == nil || called || !strings.Contains(err.Error(), "timeout.New") {
		t.Errorf("zero Policy: %v, called %t; want an error pointing to timeout.New", err, called)
	}
}

// TestPanicCancels: a call that panics does not leave its context to the
// deadline.
func TestPanicCancels(t *testing.T) {
	p, err := timeout.New(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var actx context.Context
	func() {
		defer func() { _ = recover() }()
		_ = p.Do(context.Background(), func(ctx context.Context) error { actx = ctx; panic("boom") })
	}()
	if actx == nil || actx.Err() == nil {
		t.Error("the context of a panicking call was left to its deadline")
	}
}

// TestOursAfterCallerEnds: when this policy's timer ended the call's
// context, the result is the policy's timeout even if the call, ignoring
// its context, returns after the caller's own deadline has passed too.
func TestOursAfterCallerEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := timeout.New(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err = p.Do(ctx, func(context.Context) error {
			time.Sleep(3 * time.Second) // ignores its context
			return context.DeadlineExceeded
		})
		if !timeout.Expired(err) {
			t.Errorf("got %v, want the policy's timeout", err)
		}
	})
}

// TestLatencyConsistent: a quantile declared twice, or a higher quantile
// faster than a lower one, is refused by name.
func TestLatencyConsistent(t *testing.T) {
	for _, opts := range [][]timeout.Option{
		{timeout.Latency(0.99, 100*time.Millisecond), timeout.Latency(0.99, 200*time.Millisecond)},
		{timeout.Latency(0.5, 300*time.Millisecond), timeout.Latency(0.99, 100*time.Millisecond)},
	} {
		if p, err := timeout.New(time.Second, opts...); p != nil || err == nil || !strings.Contains(err.Error(), "Latency(") {
			t.Errorf("got %v, %v; want an error naming Latency", p, err)
		}
	}
}

// BenchmarkDoAdaptive: a successful call under an adaptive timeout, and one
// its timeout cut (the call sees its context already ended).
func BenchmarkDoAdaptive(b *testing.B) {
	p, err := timeout.New(100*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{}))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("success", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = p.Do(ctx, func(context.Context) error { return nil })
		}
	})
	b.Run("observe-timeout", func(b *testing.B) {
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			bridge.TimeoutOf(p).Observe(start, context.DeadlineExceeded, true, false)
		}
	})
}
