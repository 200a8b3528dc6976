package chain_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// never is a hedge whose delay never ends in a test.
func never() chain.Policy { return mustNew(hedge.New(hedge.Settings{Delay: time.Hour})) }

// load is what closedLoop saw: the calls made, those the limit refused,
// and the limit at the end.
type load struct {
	calls, refused, limit int
}

// closedLoop runs 16 callers through c for 3 s of virtual time, each
// making one call after another to a downstream that answers in 60 ms; a
// refused caller comes back after 60 ms. Each call has the deadline
// callerDeadline (0: none). Every loop is bounded.
func closedLoop(c *chain.Chain, l *limit.Limiter, callerDeadline time.Duration) load {
	const callers, answer, span = 16, 60 * time.Millisecond, 3 * time.Second
	var (
		mu  sync.Mutex
		got load
		wg  sync.WaitGroup
	)
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for i := 0; i < 1000 && time.Since(start) < span; i++ {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if callerDeadline > 0 {
					ctx, cancel = context.WithTimeout(ctx, callerDeadline)
				}
				err := c.Do(ctx, func(ctx context.Context) error {
					select {
					case <-time.After(answer):
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				})
				cancel()
				refused := errors.Is(err, limit.ErrLimited)
				mu.Lock()
				got.calls++
				if refused {
					got.refused++
				}
				mu.Unlock()
				if refused {
					time.Sleep(answer)
				}
			}
		})
	}
	wg.Wait()
	got.limit = l.Limit()
	return got
}

// TestLimitReadsTheCallersDeadline (issue 33, cause 5): Gradient2's
// DeadlineShare judges a call's round trip against the deadline of the
// context the chain was called with, whatever the chain's shape: not
// against the attempt timeout a hedge outside the limit hoisted into its
// attempts' context, nor against a timeout outside the limit that a
// fallback made a context before running what is inside it. 16 callers
// without a deadline, 60 ms answers, a 100 ms attempt timeout: the limit
// stays at 32 and refuses nothing, as without the hedge (it fell to 8 and
// refused most calls). With a 110 ms deadline of their own, the callers
// are judged alike in every shape: 60 ms is more than half their time.
func TestLimitReadsTheCallersDeadline(t *testing.T) {
	newLimit := func(share float64) *limit.Limiter {
		return mustNew(limit.New(limit.Settings{InitialLimit: 32,
			Algorithm: limit.Gradient2(limit.Gradient2Settings{DeadlineShare: share})}))
	}
	attempt := func() chain.Policy { return mustNew(timeout.New(100 * time.Millisecond)) }
	shapes := []struct {
		name string
		ps   func(l *limit.Limiter) []chain.Policy
	}{
		{"limit → timeout", func(l *limit.Limiter) []chain.Policy {
			return []chain.Policy{l, attempt()}
		}},
		{"hedge → limit → timeout (hoisted)", func(l *limit.Limiter) []chain.Policy {
			return []chain.Policy{never(), l, attempt()}
		}},
		{"timeout 110ms → fallback → limit → timeout", func(l *limit.Limiter) []chain.Policy {
			fb := mustNew(fallback.New(func(context.Context, error) error { return nil }))
			return []chain.Policy{mustNew(timeout.New(110 * time.Millisecond)), fb, l, attempt()}
		}},
		{"timeout 110ms → hedge → limit → timeout (hoisted)", func(l *limit.Limiter) []chain.Policy {
			return []chain.Policy{mustNew(timeout.New(110 * time.Millisecond)), never(), l, attempt()}
		}},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			run := func(share float64, callerDeadline time.Duration) load {
				var got load
				synctest.Test(t, func(t *testing.T) {
					l := newLimit(share)
					c := mustNew(chain.Options{Ignore: []string{"CG018"}}.New(sh.ps(l)...))
					got = closedLoop(c, l, callerDeadline)
				})
				return got
			}
			noDeadline, off, judged := run(0, 0), run(-1, 0), run(0, 110*time.Millisecond)
			t.Logf("no caller deadline: %d of %d calls refused, limit 32 → %d; DeadlineShare -1: %d of %d, → %d; a 110ms caller deadline: %d of %d, → %d",
				noDeadline.refused, noDeadline.calls, noDeadline.limit, off.refused, off.calls, off.limit, judged.refused, judged.calls, judged.limit)
			if noDeadline.refused != 0 || noDeadline.limit < 32 {
				t.Errorf("callers without a deadline: %d of %d calls refused, limit 32 → %d; want none refused and the limit at 32 or above (DeadlineShare -1: %d refused, limit %d)",
					noDeadline.refused, noDeadline.calls, noDeadline.limit, off.refused, off.limit)
			}
			if judged.limit > 16 {
				t.Errorf("callers with a 110ms deadline: limit 32 → %d; want it to fall to 16 or below (60 ms answers take more than half their time)", judged.limit)
			}
		})
	}
}

// TestHoistedTimeoutIsNotTheCallersEnd: an attempt that its own attempt
// timeout ends counts as a failure to a breaker between a hedge and that
// timeout, as without the hedge, also when it had not yet run the
// timeout's patience (a declared p99 above the timeout, which the lint
// warns of: CG003). The hedge made the attempt's context with the
// timeout's deadline; the breaker read that context's end as the
// caller's, and three hung attempts left it closed.
func TestHoistedTimeoutIsNotTheCallersEnd(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			b := mustNew(breaker.New(breaker.Settings{ConsecutiveFailures: 3}))
			ps := []chain.Policy{b, mustNew(timeout.New(10*time.Millisecond, timeout.Latency(0.99, 20*time.Millisecond)))}
			if hedged {
				ps = append([]chain.Policy{mustNew(hedge.New(hedge.Settings{Delay: time.Hour}))}, ps...)
			}
			c := mustNew(chain.New(ps...))
			for range 3 {
				if err := c.Do(context.Background(), hang); !timeout.Expired(err) {
					t.Fatalf("hedged %v: Do = %v; want the attempt timeout", hedged, err)
				}
			}
			if cn := b.Counts(); b.State() != breaker.StateOpen {
				t.Errorf("hedged %v: after three attempts cut by their 10ms attempt timeout, breaker %v with %+v; want open, as without the hedge", hedged, b.State(), cn)
			}
		})
	}
}

// TestRetryWaitsForTheCallersDeadline: a retry inside a hedge plans its
// waits (FitDeadline) against the caller's deadline, never against the
// attempt timeout inside it (the chain hoists no timeout past a retry).
// Three attempts that fail at once, 60 ms waits, a 100 ms attempt
// timeout: without a caller's deadline, the waits are kept (the third
// attempt at 120 ms); with 150 ms left, the first wait is shortened to 50
// ms and the second to none, so that each attempt has its 100 ms.
func TestRetryWaitsForTheCallersDeadline(t *testing.T) {
	for _, tc := range []struct {
		name           string
		callerDeadline time.Duration
		want           time.Duration
	}{
		{"no caller deadline", 0, 120 * time.Millisecond},
		{"150ms caller deadline", 150 * time.Millisecond, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := mustNew(retry.New(retry.MaxAttempts(3), retry.Constant(60*time.Millisecond), retry.Jitter(0), retry.FitDeadline()))
				c := mustNew(chain.New(never(), r, mustNew(timeout.New(100*time.Millisecond))))
				ctx := context.Background()
				if tc.callerDeadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.callerDeadline)
					defer cancel()
				}
				start := time.Now()
				var attempts int
				var last time.Duration
				err := c.Do(ctx, func(context.Context) error {
					attempts++
					last = time.Since(start)
					return errDown
				})
				var ex *retry.ExhaustedError
				if !errors.As(err, &ex) || ex.Reason != retry.ReasonAttempts || attempts != 3 || last != tc.want {
					t.Errorf("Do = %v; %d attempts, the last at %v; want 3 attempts used up, the last at %v", err, attempts, last, tc.want)
				}
			})
		})
	}
}

// TestLintCallerIsDeclared: the lint's caller's deadline is
// Options.CallerDeadline; a hedge that makes the attempts' contexts with
// the attempt timeout inside a breaker does not make that timeout a
// deadline outside the breaker: CG004 says the same with and without the
// hedge.
func TestLintCallerIsDeclared(t *testing.T) {
	for _, callerDeadline := range []time.Duration{0, 40 * time.Millisecond, time.Second} {
		cg004 := func(hedged bool) []string {
			ps := []chain.Policy{mustNew(breaker.New(breaker.Settings{ConsecutiveFailures: 5})), mustNew(timeout.New(100 * time.Millisecond))}
			if hedged {
				ps = append([]chain.Policy{never()}, ps...)
			}
			c := mustNew(chain.Options{CallerDeadline: callerDeadline, MaxDetection: 100 * time.Millisecond}.New(ps...))
			var got []string
			for _, f := range c.Findings() {
				if f.Code == "CG004" {
					got = append(got, f.Message)
				}
			}
			return got
		}
		plain, hedged := cg004(false), cg004(true)
		if len(plain) != 1 || !slices.Equal(plain, hedged) {
			t.Errorf("CallerDeadline %v: CG004 %q without a hedge, %q with; want one finding, the same", callerDeadline, plain, hedged)
		}
	}
}
