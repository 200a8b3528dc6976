package chain_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
)

func mustNew[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestHedgeInChain: retry → hedge → breaker → attempt timeout. The first
// attempt hangs; the hedge after 20 ms answers in 10 ms. The call succeeds
// at 30 ms; the breaker counts the hedge's success and the canceled first
// attempt as neutral (the chain gave up on it, not the downstream).
func TestHedgeInChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustNew(hedge.New(hedge.Settings{Delay: 20 * time.Millisecond}))
		b := mustNew(breaker.New(breaker.Settings{ConsecutiveFailures: 1}))
		r := mustNew(retry.New(retry.MaxAttempts(3), retry.Constant(time.Millisecond), retry.Jitter(0)))
		to := mustNew(timeout.New(time.Second))
		c := mustNew(chain.New(r, h, b, to))
		var n atomic.Int32
		start := time.Now()
		err := c.Do(t.Context(), func(ctx context.Context) error {
			if n.Add(1) == 1 {
				<-ctx.Done()
				return ctx.Err()
			}
			time.Sleep(10 * time.Millisecond)
			return nil
		})
		if err != nil || time.Since(start) != 30*time.Millisecond {
			t.Errorf("Do = %v after %v; want nil after 30ms", err, time.Since(start))
		}
		if cn := b.Counts(); cn.Successes != 1 || cn.Failures != 0 || cn.Neutral != 1 {
			t.Errorf("breaker %+v; want 1 success and 1 neutral (the canceled loser)", cn)
		}
		if b.State() != breaker.StateClosed {
			t.Errorf("breaker %v; want closed", b.State())
		}
	})
}

// TestHedgeAttemptTimeout: a hedge's attempt has its own attempt timeout:
// with both attempts hanging, each is cut by the 100 ms timeout (the
// first at 100 ms, the hedge at 120 ms), and the call fails with the
// timeout.
func TestHedgeAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustNew(hedge.New(hedge.Settings{Delay: 20 * time.Millisecond}))
		to := mustNew(timeout.New(100 * time.Millisecond))
		c := mustNew(chain.New(h, to))
		start := time.Now()
		err := c.Do(t.Context(), func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})
		if !timeout.Expired(err) || time.Since(start) != 120*time.Millisecond {
			t.Errorf("Do = %v after %v; want the attempt timeout after 120ms", err, time.Since(start))
		}
	})
}

// TestHedgeSuccessAllocs: a hedged chain's call answered before the
// delay allocates no more than the same chain without the hedge: the
// hedge makes each attempt's context as the attempt timeout inside it
// would have (a cancelable context of its own would cost 3 more).
func TestHedgeSuccessAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	h := mustNew(hedge.New(hedge.Settings{Delay: time.Hour}))
	b := mustNew(breaker.New(breaker.Settings{ConsecutiveFailures: 5}))
	to := mustNew(timeout.New(time.Second))
	plain := mustNew(chain.New(b, to))
	hedged := mustNew(chain.New(h, b, to))
	ctx := context.Background()
	call := func(context.Context) error { return nil }
	base := testing.AllocsPerRun(1000, func() { _ = plain.Do(ctx, call) })
	got := testing.AllocsPerRun(1000, func() { _ = hedged.Do(ctx, call) })
	if got > base {
		t.Errorf("hedged chain allocates %v a call; want at most %v, as without the hedge", got, base)
	}
}

// TestOuterTimeoutNeutralToGates: a call that the chain's overall timeout
// cuts is the caller's end to a throttle and a limiter inside it: no
// refusal, no drop.
func TestOuterTimeoutNeutralToGates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := mustNew(throttle.New(throttle.Settings{}))
		l := mustNew(limit.New(limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{}), InitialLimit: 10}))
		c := mustNew(chain.New(mustNew(timeout.New(50*time.Millisecond)), th, l))
		err := c.Do(t.Context(), func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})
		if !timeout.Expired(err) {
			t.Fatalf("Do = %v; want the overall timeout", err)
		}
		if req, _ := th.Counts(); req != 0 || l.Limit() != 10 {
			t.Errorf("throttle counts %d requests, limit %d; want 0 (neutral) and 10 (no drop)", req, l.Limit())
		}
	})
}

// TestPanicReleasesSlot: a call that panics inside a bulkhead of one slot
// gives the slot back; the next call is admitted.
func TestPanicReleasesSlot(t *testing.T) {
	bh := mustNew(limit.NewBulkhead(limit.BulkheadSettings{MaxConcurrent: 1}))
	c := mustNew(chain.New(bh))
	func() {
		defer func() { _ = recover() }()
		_ = c.Do(t.Context(), func(context.Context) error { panic("boom") })
	}()
	if err := c.Do(t.Context(), func(context.Context) error { return nil }); err != nil || bh.InFlight() != 0 {
		t.Errorf("after a panic: Do = %v, %d in flight; want nil and 0", err, bh.InFlight())
	}
}

// TestGatesAllocate nothing: a chain with a throttle, a limiter and a
// bulkhead allocates no more per call than the same chain without them.
func TestGatesAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	b := mustNew(breaker.New(breaker.Settings{ConsecutiveFailures: 5}))
	to := mustNew(timeout.New(time.Second))
	plain := mustNew(chain.New(b, to))
	gated := mustNew(chain.New(mustNew(throttle.New(throttle.Settings{})), mustNew(limit.New(limit.Settings{})),
		mustNew(limit.NewBulkhead(limit.BulkheadSettings{MaxConcurrent: 10})), b, to))
	ctx := context.Background()
	call := func(context.Context) error { return nil }
	base := testing.AllocsPerRun(1000, func() { _ = plain.Do(ctx, call) })
	if got := testing.AllocsPerRun(1000, func() { _ = gated.Do(ctx, call) }); got > base {
		t.Errorf("with a throttle, a limiter and a bulkhead: %v allocations a call; want %v, as without", got, base)
	}
}
