package limit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/limit"
)

func mustLimiter(t testing.TB, s limit.Settings) *limit.Limiter {
	t.Helper()
	l, err := limit.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var errTimeout = fmt.Errorf("attempt: %w", context.DeadlineExceeded)

// acquireN admits n calls at once; the i-th (from 0) has i+1 in flight at
// its admission.
func acquireN(t *testing.T, l *limit.Limiter, n int) []limit.Permit {
	t.Helper()
	ps := make([]limit.Permit, n)
	for i := range ps {
		p, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatalf("call %d of %d: %v (limit %d)", i+1, n, err, l.Limit())
		}
		ps[i] = p
	}
	return ps
}

func wantLimit(t *testing.T, l *limit.Limiter, want int, what string) {
	t.Helper()
	if got := l.Limit(); got != want {
		t.Fatalf("%s: Limit() = %d, want %d", what, got, want)
	}
}

// TestAIMD pins AIMD's numbers: +1 for a success with at least half the
// limit in flight at its admission, nothing below that, ×0.9 (floored, at
// least −1) on a drop, within [MinLimit, MaxLimit].
func TestAIMD(t *testing.T) {
	l := mustLimiter(t, limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{}), InitialLimit: 20, MinLimit: 5, MaxLimit: 22})
	ps := acquireN(t, l, 10)
	ps[9].Done(nil) // 10 in flight at admission: 10·2 >= 20
	wantLimit(t, l, 21, "success at half the limit")
	ps[0].Done(nil) // 1 in flight: the callers bound the load, not the limit
	wantLimit(t, l, 21, "success at 1 in flight")
	ps[1].Done(errTimeout)
	wantLimit(t, l, 18, "drop at 21 (⌊21·0.9⌋)")
	for _, p := range ps[2:9] {
		p.Done(errTimeout)
	}
	// 18 → 16 → 14 → 12 → 10 → 9 → 8 → 7
	wantLimit(t, l, 7, "7 more drops")
	for range 3 {
		p, _ := l.Acquire(context.Background())
		p.Done(errTimeout)
	}
	wantLimit(t, l, 5, "drops at MinLimit")
	for range 30 {
		ps := acquireN(t, l, l.Limit())
		for _, p := range ps {
			p.Done(nil)
		}
	}
	wantLimit(t, l, 22, "successes at MaxLimit")
	if l.InFlight() != 0 {
		t.Fatalf("InFlight() = %d, want 0", l.InFlight())
	}

	half := mustLimiter(t, limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{BackoffRatio: 0.5}), InitialLimit: 20})
	p, _ := half.Acquire(context.Background())
	p.Done(errTimeout)
	wantLimit(t, half, 10, "drop at 20 with BackoffRatio 0.5")
	d := mustLimiter(t, limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{}), InitialLimit: 20})
	p, _ = d.Acquire(context.Background())
	p.Done(errTimeout)
	wantLimit(t, d, 18, "drop at 20 with the default BackoffRatio")
	p, _ = d.Acquire(context.Background())
	p.Done(errTimeout)
	wantLimit(t, d, 16, "second drop (⌊18·0.9⌋)")
}

// TestDrops: what is a drop, what is ignored, what is neutral.
func TestDrops(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		ctx    func() (context.Context, context.CancelFunc)
		isDrop func(error) bool
		want   int
	}{
		{name: "timeout", err: errTimeout, want: 18},
		{name: "bare deadline", err: context.DeadlineExceeded, want: 18},
		{name: "other failure", err: errors.New("500"), want: 20},
		{name: "inner rejection", err: errors.Join(callguard.ErrRejected, context.DeadlineExceeded), want: 20},
		{name: "limit's own rejection", err: &limit.RejectedError{}, want: 20},
		{name: "caller canceled", err: errTimeout, ctx: func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, want: 20},
		{name: "caller's deadline passed", err: errTimeout, ctx: func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}, want: 20},
		{name: "custom IsDrop", err: errors.New("503"), isDrop: func(err error) bool { return err.Error() == "503" }, want: 18},
		{name: "custom IsDrop, not a drop", err: errTimeout, isDrop: func(error) bool { return false }, want: 20},
	} {
		l := mustLimiter(t, limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{}), InitialLimit: 20, IsDrop: tc.isDrop})
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if tc.ctx != nil {
			ctx, cancel = tc.ctx()
		}
		p, err := l.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p.Done(tc.err)
		cancel()
		if got := l.Limit(); got != tc.want {
			t.Errorf("%s: Limit() = %d, want %d", tc.name, got, tc.want)
		}
	}
	l := mustLimiter(t, limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{}), InitialLimit: 2})
	ps := acquireN(t, l, 2)
	ps[1].DoneNeutral()
	ps[0].DoneNeutral()
	wantLimit(t, l, 2, "DoneNeutral")
	if l.InFlight() != 0 {
		t.Fatalf("InFlight() = %d after DoneNeutral, want 0", l.InFlight())
	}
}

// TestLimitRiseAdmitsWaiters: when the limit rises, queued calls get the
// new slots at once; when it falls, calls in flight finish and new ones
// wait.
func TestLimitRiseAdmitsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustLimiter(t, limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{}), InitialLimit: 2, MaxQueue: 5})
		ps := acquireN(t, l, 2)
		w1 := enqueue(context.Background(), l)
		w2 := enqueue(context.Background(), l)
		ps[1].Done(nil) // limit 2 → 3, then the slot is freed: both waiters in
		synctest.Wait()
		if l.Limit() != 3 || l.Queued() != 0 || l.InFlight() != 3 {
			t.Fatalf("Limit, Queued, InFlight = %d, %d, %d; want 3, 0, 3", l.Limit(), l.Queued(), l.InFlight())
		}
		r1, r2 := <-w1, <-w2
		if r1.err != nil || r2.err != nil {
			t.Fatalf("waiters: %v, %v; want admitted", r1.err, r2.err)
		}
		r1.p.Done(errTimeout) // 3 → 2 with 2 still in flight
		wantLimit(t, l, 2, "drop at 3")
		w3 := enqueue(context.Background(), l)
		if l.Queued() != 1 {
			t.Fatalf("Queued() = %d at the lowered limit, want 1", l.Queued())
		}
		ps[0].DoneNeutral()
		r3 := <-w3
		if r3.err != nil {
			t.Fatal(r3.err)
		}
		r2.p.DoneNeutral()
		r3.p.DoneNeutral()
	})
}

// TestSettingsErrors: each invalid setting is named; defaults are filled.
func TestSettingsErrors(t *testing.T) {
	for _, tc := range []struct {
		s     limit.Settings
		field string
	}{
		{limit.Settings{InitialLimit: -1}, "Settings.InitialLimit"},
		{limit.Settings{MinLimit: -1}, "Settings.MinLimit"},
		{limit.Settings{MaxLimit: -1}, "Settings.MaxLimit"},
		{limit.Settings{MinLimit: 10, MaxLimit: 5}, "Settings.MinLimit"},
		{limit.Settings{InitialLimit: 300}, "Settings.InitialLimit"},
		{limit.Settings{InitialLimit: 2, MinLimit: 5}, "Settings.InitialLimit"},
		{limit.Settings{MaxQueue: -1}, "Settings.MaxQueue"},
		{limit.Settings{MaxQueue: 1, MaxWait: -1}, "Settings.MaxWait"},
		{limit.Settings{MaxWait: time.Second}, "Settings.MaxWait"},
		{limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{BackoffRatio: 1})}, "AIMDSettings.BackoffRatio"},
		{limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{BackoffRatio: 0.4})}, "AIMDSettings.BackoffRatio"},
		{limit.Settings{Algorithm: limit.Gradient2(limit.Gradient2Settings{Smoothing: 1.5})}, "Gradient2Settings.Smoothing"},
		{limit.Settings{Algorithm: limit.Gradient2(limit.Gradient2Settings{QueueSize: -1})}, "Gradient2Settings.QueueSize"},
		{limit.Settings{Algorithm: limit.Gradient2(limit.Gradient2Settings{Tolerance: 0.5})}, "Gradient2Settings.Tolerance"},
		{limit.Settings{Algorithm: limit.Gradient2(limit.Gradient2Settings{LongWindow: -1})}, "Gradient2Settings.LongWindow"},
		{limit.Settings{Algorithm: limit.Gradient2(limit.Gradient2Settings{DeadlineShare: 1.5})}, "Gradient2Settings.DeadlineShare"},
		{limit.Settings{Algorithm: limit.Gradient2(limit.Gradient2Settings{DeadlineShare: math.NaN()})}, "Gradient2Settings.DeadlineShare"},
	} {
		_, err := limit.New(tc.s)
		var se *limit.SettingsError
		if !errors.As(err, &se) || se.Field != tc.field {
			t.Errorf("New(%+v): %v, want a SettingsError for %s", tc.s, err, tc.field)
		}
	}
	l := mustLimiter(t, limit.Settings{})
	s := l.Settings()
	if s.InitialLimit != 20 || s.MinLimit != 1 || s.MaxLimit != 200 || l.Limit() != 20 {
		t.Errorf("defaults: initial %d in [%d, %d], Limit() %d; want 20 in [1, 200], 20", s.InitialLimit, s.MinLimit, s.MaxLimit, l.Limit())
	}
	if got, want := s.Algorithm.String(), "Gradient2(smoothing 0.2, queue 4, tolerance 1.5, long window 600, deadline share 0.5)"; got != want {
		t.Errorf("default algorithm %q, want %q", got, want)
	}
	if got := mustLimiter(t, limit.Settings{MaxLimit: 10}).Limit(); got != 10 {
		t.Errorf("MaxLimit 10, default InitialLimit: Limit() = %d, want 10", got)
	}
	if got := limit.AIMD(limit.AIMDSettings{}).String(); got != "AIMD(backoff 0)" {
		t.Errorf("AIMD String before New: %q", got)
	}
	a := mustLimiter(t, limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{})}).Settings().Algorithm.String()
	if a != "AIMD(backoff 0.9)" {
		t.Errorf("AIMD after New: %q, want AIMD(backoff 0.9)", a)
	}
}
