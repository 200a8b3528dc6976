package retry_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/retry"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errDown = errors.New("down")

func mustNew(t *testing.T, opts ...retry.Option) *retry.Policy {
	t.Helper()
	p, err := retry.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// failing returns a call that fails n times, then succeeds, recording the
// instants of its attempts.
func failing(n int, at *[]time.Duration, start time.Time, err error) func(context.Context) error {
	return func(context.Context) error {
		*at = append(*at, time.Since(start))
		if len(*at) <= n {
			return err
		}
		return nil
	}
}

func TestAttemptsAndExactWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var waits []time.Duration
		p := mustNew(t, retry.MaxAttempts(4), retry.Exponential(100*time.Millisecond, 250*time.Millisecond), retry.Jitter(0),
			retry.OnRetry(func(attempt int, err error, wait time.Duration) { waits = append(waits, wait) }))
		var at []time.Duration
		err := p.Do(context.Background(), failing(10, &at, time.Now(), errDown))
		var ex *retry.ExhaustedError
		if !errors.As(err, &ex) || ex.Attempts != 4 || ex.Reason != retry.ReasonAttempts || !errors.Is(err, errDown) {
			t.Fatalf("got %v, want ExhaustedError after 4 attempts unwrapping to errDown", err)
		}
		want := []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond, 550 * time.Millisecond}
		if !slices.Equal(at, want) {
			t.Errorf("attempts at %v, want %v", at, want)
		}
		if w := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond}; !slices.Equal(waits, w) || !slices.Equal(bridge.RetryOf(p).Waits(), w) {
			t.Errorf("OnRetry waits %v, Waits() %v, want %v", waits, bridge.RetryOf(p).Waits(), w)
		}
		at = nil
		if err := p.Do(context.Background(), failing(2, &at, time.Now(), errDown)); err != nil || len(at) != 3 {
			t.Errorf("got %v after %d attempts, want success on the 3rd", err, len(at))
		}
	})
}

func TestGivesUpAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		opts []retry.Option
		want int
	}{
		{"breaker open", breaker.ErrOpen, nil, 1},
		{"probe quota", breaker.ErrTooManyProbes, nil, 1},
		{"open with RetryWhenOpen", breaker.ErrOpen, []retry.Option{retry.RetryWhenOpen()}, 3},
		{"permanent", retry.Permanent(errDown), nil, 1},
		{"RetryIf says no", errDown, []retry.Option{retry.RetryIf(func(error) bool { return false })}, 1},
		{"pushback: do not retry", retry.WithPushback(errDown, -1), nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mustNew(t, append([]retry.Option{retry.Constant(time.Second), retry.Jitter(0)}, tc.opts...)...)
				var at []time.Duration
				start := time.Now()
				err := p.Do(context.Background(), failing(10, &at, start, tc.err))
				if len(at) != tc.want || !errors.Is(err, tc.err) {
					t.Errorf("%d attempts, %v; want %d attempts and the error", len(at), err, tc.want)
				}
				if waited := time.Since(start); waited != time.Duration(tc.want-1)*time.Second {
					t.Errorf("waited %v, want %v", waited, time.Duration(tc.want-1)*time.Second)
				}
			})
		})
	}
}

func TestPushbackOverridesBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, retry.Constant(time.Second), retry.Jitter(0))
		var at []time.Duration
		err := p.Do(context.Background(), failing(1, &at, time.Now(), retry.WithPushback(errDown, 3*time.Second)))
		if err != nil || !slices.Equal(at, []time.Duration{0, 3 * time.Second}) {
			t.Errorf("got %v, attempts at %v; want success after the server's 3 s", err, at)
		}
	})
}

func TestDeadlineEndsRetryAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, retry.Constant(time.Second), retry.Jitter(0))
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		var at []time.Duration
		err := p.Do(ctx, failing(10, &at, start, errDown))
		var ex *retry.ExhaustedError
		if !errors.As(err, &ex) || ex.Reason != retry.ReasonDeadline || len(at) != 2 || time.Since(start) != time.Second {
			t.Errorf("got %v after %d attempts and %v; want ReasonDeadline after 2 attempts at 1 s", err, len(at), time.Since(start))
		}
		// DoUntil: an enclosing deadline that is not on the context.
		at = nil
		start = time.Now()
		err = bridge.RetryOf(p).DoUntil(context.Background(), start.Add(500*time.Millisecond), 0, failing(10, &at, start, errDown))
		if !errors.As(err, &ex) || ex.Reason != retry.ReasonDeadline || len(at) != 1 || time.Since(start) != 0 {
			t.Errorf("DoUntil: %v after %d attempts; want ReasonDeadline at once", err, len(at))
		}
	})
}

func TestCancelDuringWaitReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, retry.Constant(time.Hour), retry.Jitter(0))
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		go func() {
			time.Sleep(time.Second)
			cancel()
		}()
		err := p.Do(ctx, func(context.Context) error { return errDown })
		var ex *retry.ExhaustedError
		if !errors.As(err, &ex) || ex.Reason != retry.ReasonCanceled || !errors.Is(err, context.Canceled) || !errors.Is(err, errDown) || time.Since(start) != time.Second {
			t.Errorf("got %v after %v; want a cancellation at 1 s matching context.Canceled and the last error", err, time.Since(start))
		}
		// Canceled with a cause: the error matches both.
		shutdown := errors.New("shutting down")
		cctx, ccancel := context.WithCancelCause(context.Background())
		go func() {
			time.Sleep(time.Second)
			ccancel(shutdown)
		}()
		err = p.Do(cctx, func(context.Context) error { return errDown })
		if !errors.Is(err, context.Canceled) || !errors.Is(err, shutdown) || !errors.Is(err, errDown) {
			t.Errorf("canceled with a cause: got %v; want it to match context.Canceled, the cause and the last error", err)
		}
		// An error after the caller's own cancellation is not retried.
		calls := 0
		_ = p.Do(ctx, func(context.Context) error { calls++; return errDown })
		if calls != 1 {
			t.Errorf("%d attempts with a canceled context, want 1", calls)
		}
	})
}

// TestBudgetUnderOutage: a total outage, 10,000 requests over 100 s with 3
// attempts each: with a 10 % budget and a floor of 1 retry a second,
// attempts per request stay ≤ 1.1 + the floor's share.
func TestBudgetUnderOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget, err := retry.NewBudget(0.1, 1)
		if err != nil {
			t.Fatal(err)
		}
		p := mustNew(t, retry.MaxAttempts(3), retry.Constant(0), retry.WithBudget(budget))
		attempts, requests := 0, 10000
		for range requests {
			_ = p.Do(context.Background(), func(context.Context) error { attempts++; return errDown })
			time.Sleep(10 * time.Millisecond)
		}
		ratio := float64(attempts) / float64(requests)
		// 100 s of floor (100 retries) and the initial bucket (11 tokens).
		limit := 1.1 + (100.0+11)/float64(requests)
		t.Logf("attempts per request %.4f (limit %.4f)", ratio, limit)
		if ratio > limit || ratio < 1.09 {
			t.Errorf("attempts per request %.4f, want within [1.09, %.4f]", ratio, limit)
		}
	})
}

func TestSuccessBuildsNothing(t *testing.T) {
	p := mustNew(t, retry.MaxAttempts(5))
	ctx := context.Background()
	call := func(context.Context) error { return nil }
	if n := testing.AllocsPerRun(100, func() { _ = p.Do(ctx, call) }); n != 0 {
		t.Errorf("a success allocates %v times, want 0", n)
	}
}

func TestInvalidOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  retry.Option
		name string
	}{
		{retry.MaxAttempts(0), "MaxAttempts(0)"},
		{retry.MaxAttempts(retry.MaxAttemptsLimit + 1), "MaxAttempts(10001)"},
		{retry.MaxAttempts(math.MaxInt), "MaxAttempts("},
		{retry.Constant(-time.Second), "Constant(-1s)"},
		{retry.Exponential(time.Second, time.Millisecond), "Exponential(1s, 1ms)"},
		{retry.Exponential(-time.Second, time.Second), "Exponential(-1s, 1s)"},
		{retry.Jitter(1.5), "Jitter(1.5)"},
		{retry.RetryIf(nil), "RetryIf(nil)"},
		{retry.WithBudget(nil), "WithBudget(nil)"},
		{nil, "nil Option"},
	} {
		p, err := retry.New(tc.opt)
		if p != nil || err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("New(%s) = %v, %v; want an error naming it", tc.name, p, err)
		}
	}
	if _, err := retry.NewBudget(2, 0); err == nil || !strings.Contains(err.Error(), "ratio") {
		t.Errorf("NewBudget(2, 0): %v, want an error naming ratio", err)
	}
	if _, err := retry.NewBudget(0.1, -1); err == nil || !strings.Contains(err.Error(), "minPerSecond") {
		t.Errorf("NewBudget(0.1, -1): %v, want an error naming minPerSecond", err)
	}
}

// TestPushbackTooLong: a server asking for a wait beyond MaxPushback gets no
// retry, instead of a sleeping caller.
func TestPushbackTooLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, retry.MaxPushback(time.Minute))
		start := time.Now()
		calls := 0
		err := p.Do(context.Background(), func(context.Context) error { calls++; return retry.WithPushback(errDown, 24*time.Hour) })
		var ex *retry.ExhaustedError
		if !errors.As(err, &ex) || ex.Reason != retry.ReasonPushback || calls != 1 || time.Since(start) != 0 {
			t.Errorf("got %v after %d calls and %v; want ReasonPushback at once", err, calls, time.Since(start))
		}
		if _, err := retry.New(retry.MaxPushback(-1)); err == nil || !strings.Contains(err.Error(), "MaxPushback") {
			t.Errorf("MaxPushback(-1): %v", err)
		}
	})
}

// TestContinue: retrying a first attempt made elsewhere: the failed attempt
// counts, no new call is made for it.
func TestContinue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, retry.MaxAttempts(3), retry.Constant(time.Second), retry.Jitter(0))
		calls := 0
		err := bridge.RetryOf(p).Continue(context.Background(), time.Time{}, 0, errDown, func(context.Context) error { calls++; return errDown })
		var ex *retry.ExhaustedError
		if !errors.As(err, &ex) || ex.Attempts != 3 || calls != 2 {
			t.Errorf("got %v after %d calls; want 3 attempts, 2 of them calls", err, calls)
		}
		if err := bridge.RetryOf(p).Continue(context.Background(), time.Time{}, 0, nil, nil); err != nil {
			t.Errorf("Continue(nil error) = %v", err)
		}
	})
}

// TestMostAttempts: the most attempts allowed has its waits listed, and the
// zero Policy none.
func TestMostAttempts(t *testing.T) {
	p := mustNew(t, retry.MaxAttempts(retry.MaxAttemptsLimit))
	if n := len(bridge.RetryOf(p).Waits()); n != retry.MaxAttemptsLimit-1 {
		t.Errorf("%d waits, want %d", n, retry.MaxAttemptsLimit-1)
	}
	if w := bridge.RetryOf((&retry.Policy{})).Waits(); w != nil {
		t.Errorf("zero Policy waits %v, want none", w)
	}
}

// TestZeroBudget: NewBudget(0, 0) allows no retry at all.
func TestZeroBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := retry.NewBudget(0, 0)
		if err != nil {
			t.Fatal(err)
		}
		p := mustNew(t, retry.MaxAttempts(3), retry.Constant(0), retry.WithBudget(b))
		n := 0
		for range 100 {
			_ = p.Do(context.Background(), func(context.Context) error { n++; return errDown })
			time.Sleep(time.Second)
		}
		if n != 100 {
			t.Errorf("%d attempts for 100 failing requests, want 100: no retry", n)
		}
	})
}

// TestWithPushbackNil: retry advice on no error is no error.
func TestWithPushbackNil(t *testing.T) {
	if err := retry.WithPushback(nil, time.Second); err != nil {
		t.Errorf("WithPushback(nil, 1s) = %v, want nil", err)
	}
	if err := retry.WithPushback(nil, -1); err != nil {
		t.Errorf("WithPushback(nil, -1) = %v, want nil", err)
	}
}

// TestHugeWaits is issue #15: a wait near the largest Duration, jittered by
// backoff/v4 in float64, wrapped around to a negative one and the retry
// fired at once. Under a 1 s deadline a wait longer than the deadline ends
// the retries at once (ReasonDeadline) and never makes a second attempt
// early; without a deadline, canceling the context ends the wait. Each case
// runs 200 times with the default jitter: the wrap hit about half the runs
// of Constant(MaxInt64). Exponential(1s, MaxInt64) starts at 1 s ± 20 %, so
// it may retry once within the deadline, but never before its shortest
// wait.
func TestHugeWaits(t *testing.T) {
	const runs = 200
	for _, tc := range []struct {
		name  string
		opt   retry.Option
		first time.Duration // the schedule's first wait, before jitter
	}{
		{"Constant(MaxInt64)", retry.Constant(math.MaxInt64), math.MaxInt64},
		{"Constant(8e18)", retry.Constant(8e18), 8e18},
		{"Exponential(1s,MaxInt64)", retry.Exponential(time.Second, math.MaxInt64), time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var waits []time.Duration
			p := mustNew(t, tc.opt, retry.OnRetry(func(_ int, _ error, wait time.Duration) { waits = append(waits, wait) }))
			shortest := time.Duration(float64(tc.first) * (1 - retry.DefaultJitter))
			synctest.Test(t, func(t *testing.T) {
				retried, bad, first := 0, 0, ""
				fail := func(format string, args ...any) {
					if bad++; bad == 1 {
						first = fmt.Sprintf(format, args...)
					}
				}
				for run := range runs {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					start := time.Now()
					var at []time.Duration
					waits = waits[:0]
					err := p.Do(ctx, failing(10, &at, start, errDown))
					took := time.Since(start)
					cancel()
					var ex *retry.ExhaustedError
					switch {
					case !errors.As(err, &ex) || ex.Reason != retry.ReasonDeadline || !errors.Is(err, errDown):
						fail("run %d: got %v, want an ExhaustedError with ReasonDeadline", run, err)
					case shortest >= time.Second && len(at) != 1:
						fail("run %d: got %d attempts at %v (waits %v), want 1: the wait is past the deadline", run, len(at), at, waits)
					case slices.ContainsFunc(waits, func(w time.Duration) bool { return w < shortest }) || len(at) > 1 && at[1] < shortest:
						fail("run %d: got waits %v and attempts at %v, want no wait below %v", run, waits, at, shortest)
					case took != at[len(at)-1]:
						fail("run %d: returned %v after the last attempt, want at once", run, took-at[len(at)-1])
					}
					if len(at) > 1 {
						retried++
					}
				}
				if bad > 0 {
					t.Errorf("%d of %d runs went wrong; the first: %s", bad, runs, first)
				}
				t.Logf("%d of %d runs retried once within the deadline", retried, runs)
			})
		})
	}
	// No deadline: only canceling the context ends the wait.
	for _, tc := range []struct {
		name string
		d    time.Duration
	}{{"MaxInt64", math.MaxInt64}, {"8e18", 8e18}} {
		t.Run(fmt.Sprintf("Constant(%s)/canceled", tc.name), func(t *testing.T) {
			p := mustNew(t, retry.Constant(tc.d))
			synctest.Test(t, func(t *testing.T) {
				bad, first := 0, ""
				for run := range runs {
					ctx, cancel := context.WithCancel(context.Background())
					start := time.Now()
					stop := time.AfterFunc(time.Second, cancel)
					var at []time.Duration
					err := p.Do(ctx, failing(10, &at, start, errDown))
					took := time.Since(start)
					stop.Stop()
					cancel()
					var ex *retry.ExhaustedError
					if !errors.As(err, &ex) || ex.Reason != retry.ReasonCanceled || !errors.Is(err, context.Canceled) || len(at) != 1 || took != time.Second {
						if bad++; bad == 1 {
							first = fmt.Sprintf("run %d: got %v after %d attempts at %v, returned at %v; want ReasonCanceled after 1 attempt, at the cancellation (1s)", run, err, len(at), at, took)
						}
					}
				}
				if bad > 0 {
					t.Errorf("%d of %d runs went wrong; the first: %s", bad, runs, first)
				}
			})
		})
	}
}

// TestRejectionRetriedWhenAdmittedAfterWait: a breaker's rejection says
// when it admits again; a retry gives up at once when the breaker will
// still be open after its wait, and tries again when the stay ends by then
// (it gave up on every rejection).
func TestRejectionRetriedWhenAdmittedAfterWait(t *testing.T) {
	for _, tc := range []struct {
		wait      time.Duration
		wantCalls int
		wantTook  time.Duration
	}{
		{100 * time.Millisecond, 0, 0},                      // open 150 ms: still open after the wait
		{200 * time.Millisecond, 1, 200 * time.Millisecond}, // open until 150 ms: admitted after the wait
	} {
		synctest.Test(t, func(t *testing.T) {
			b, err := breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: 150 * time.Millisecond, HalfOpenProbes: 1})
			if err != nil {
				t.Fatal(err)
			}
			_ = b.Do(context.Background(), func(context.Context) error { return errors.New("down") }) // opens it
			r, err := retry.New(retry.MaxAttempts(2), retry.Constant(tc.wait), retry.Jitter(0))
			if err != nil {
				t.Fatal(err)
			}
			calls := 0
			start := time.Now()
			err = r.Do(context.Background(), func(ctx context.Context) error {
				return b.Do(ctx, func(context.Context) error { calls++; return nil })
			})
			took := time.Since(start)
			wantErr := tc.wantCalls == 0
			if calls != tc.wantCalls || took != tc.wantTook || (err != nil) != wantErr || wantErr && !errors.Is(err, breaker.ErrOpen) {
				t.Errorf("wait %v: %d calls after %v, %v; want %d after %v", tc.wait, calls, took, err, tc.wantCalls, tc.wantTook)
			}
		})
	}
}

// TestFitDeadlineNeedsAReserve: run alone, a policy with FitDeadline knows
// no attempt timeout and waits as planned; told one (as a chain tells it),
// it shortens the wait that would leave less than that before the
// deadline.
func TestFitDeadlineNeedsAReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, retry.MaxAttempts(3), retry.Constant(400*time.Millisecond), retry.Jitter(0), retry.FitDeadline())
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		var at []time.Duration
		_ = p.Do(ctx, failing(10, &at, start, errDown))
		if want := []time.Duration{0, 400 * time.Millisecond, 800 * time.Millisecond}; !slices.Equal(at, want) {
			t.Errorf("Do: attempts at %v, want %v", at, want)
		}
		at = nil
		start = time.Now()
		_ = bridge.RetryOf(p).DoUntil(context.Background(), start.Add(time.Second), 300*time.Millisecond, failing(10, &at, start, errDown))
		if want := []time.Duration{0, 400 * time.Millisecond, 700 * time.Millisecond}; !slices.Equal(at, want) {
			t.Errorf("DoUntil with a reserve of 300 ms: attempts at %v, want %v", at, want)
		}
		// An attempt planned to take longer than all that is left cannot
		// get its time whatever the wait: the waits are kept, not rushed.
		at = nil
		start = time.Now()
		_ = bridge.RetryOf(p).DoUntil(context.Background(), start.Add(time.Second), 1200*time.Millisecond, failing(10, &at, start, errDown))
		if want := []time.Duration{0, 400 * time.Millisecond, 800 * time.Millisecond}; !slices.Equal(at, want) {
			t.Errorf("DoUntil with a reserve of 1.2 s: attempts at %v, want %v", at, want)
		}
	})
}

// TestRetryRejected: a local refusal (callguard.ErrRejected) ends the
// retries at once; with RetryRejected it is retried after the wait, as a
// failure, within the attempts and the caller's deadline.
func TestRetryRejected(t *testing.T) {
	refused := fmt.Errorf("limit: %w", callguard.ErrRejected)
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			opts     []retry.Option
			deadline time.Duration
			want     []time.Duration
			str      string
		}{
			{nil, 0, []time.Duration{0}, "retry(3)"},
			{[]retry.Option{retry.RetryRejected()}, 0, []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}, "retry(3, RetryRejected)"},
			{[]retry.Option{retry.RetryRejected()}, 150 * time.Millisecond, []time.Duration{0, 100 * time.Millisecond}, "retry(3, RetryRejected)"},
			{[]retry.Option{retry.RetryRejected(), retry.FitDeadline()}, 0, []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}, "retry(3, FitDeadline, RetryRejected)"},
		} {
			p := mustNew(t, append([]retry.Option{retry.MaxAttempts(3), retry.Constant(100 * time.Millisecond), retry.Jitter(0)}, tc.opts...)...)
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			start := time.Now()
			var at []time.Duration
			err := p.Do(ctx, failing(10, &at, start, refused))
			if !slices.Equal(at, tc.want) || !errors.Is(err, callguard.ErrRejected) || p.String() != tc.str {
				t.Errorf("%v: attempts at %v, %v; want %v, ErrRejected", p, at, err, tc.want)
			}
		}
	})
}
