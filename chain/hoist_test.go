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
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
)

// hang waits for its context to end.
func hang(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestHoistedTimeoutCountsForGates: a hedge outside a limit or a throttle
// makes the attempt's context with the deadline of the attempt timeout
// inside them (it hoists it); an attempt that timeout ends is the
// downstream's answer to them, as without the hedge, not the caller's
// end: ten attempt timeouts take an AIMD limit from 20 to 5 with the
// hedge as without it, and thirty make the throttle reject.
func TestHoistedTimeoutCountsForGates(t *testing.T) {
	limitAfter := func(hedged bool) int {
		var got int
		synctest.Test(t, func(t *testing.T) {
			l := mustNew(limit.New(limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{})}))
			var ps []chain.Policy
			if hedged {
				ps = append(ps, mustNew(hedge.New(hedge.Settings{Delay: time.Hour})))
			}
			ps = append(ps, l, mustNew(breaker.New(breaker.Settings{ConsecutiveFailures: 1000})), mustNew(timeout.New(10*time.Millisecond)))
			c := mustNew(chain.New(ps...))
			for range 10 {
				if err := c.Do(context.Background(), hang); !timeout.Expired(err) {
					t.Fatalf("Do: %v; want the attempt timeout", err)
				}
			}
			got = l.Limit()
		})
		return got
	}
	if plain, hedged := limitAfter(false), limitAfter(true); plain != 5 || hedged != plain {
		t.Errorf("AIMD limit after ten attempt timeouts: %d without a hedge, %d with; want 5 in both", plain, hedged)
	}

	rateAfter := func(hedged bool) float64 {
		var got float64
		synctest.Test(t, func(t *testing.T) {
			th := mustNew(throttle.New(throttle.Settings{}))
			var ps []chain.Policy
			if hedged {
				ps = append(ps, mustNew(hedge.New(hedge.Settings{Delay: time.Hour})))
			}
			ps = append(ps, th, mustNew(timeout.New(10*time.Millisecond)))
			c := mustNew(chain.New(ps...))
			for range 30 {
				_ = c.Do(context.Background(), hang)
			}
			got = th.RejectionRate()
		})
		return got
	}
	if plain, hedged := rateAfter(false), rateAfter(true); plain < 0.5 || hedged != plain {
		t.Errorf("throttle's rejection rate after thirty attempt timeouts: %.2f without a hedge, %.2f with; want the same, at least 0.5", plain, hedged)
	}
}

// TestHedgeCanceledInQueueRefunded: a hedge that waits in a limit's queue
// (behind another waiter) when the first attempt wins is canceled there,
// never sent: its budget token is given back (Stats.Hedges 0).
func TestHedgeCanceledInQueueRefunded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(limit.New(limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{}), InitialLimit: 2, MinLimit: 2, MaxLimit: 2, MaxQueue: 2}))
		h := mustNew(hedge.New(hedge.Settings{Delay: time.Millisecond}))
		c := mustNew(chain.New(h, l, mustNew(timeout.New(time.Second))))
		held := mustNew(l.Acquire(context.Background())) // one of the two slots, until 10 ms
		time.AfterFunc(10*time.Millisecond, func() { held.Done(nil) })
		waiter := make(chan struct{})
		time.AfterFunc(500*time.Microsecond, func() { // queued ahead of the hedge, until 20 ms
			defer close(waiter)
			p := mustNew(l.Acquire(context.Background()))
			time.Sleep(20 * time.Millisecond)
			p.Done(nil)
		})
		var sent atomic.Int32
		err := c.Do(context.Background(), func(context.Context) error {
			sent.Add(1)
			time.Sleep(5 * time.Millisecond)
			return nil
		})
		<-waiter
		if s := h.Stats(); err != nil || sent.Load() != 1 || s.Hedges != 0 || l.InFlight() != 0 || l.Queued() != 0 {
			t.Errorf("Do: %v; %d sent, hedge stats %+v, %d in flight, %d queued; want 1 sent, 0 hedges, none in flight or queued", err, sent.Load(), s, l.InFlight(), l.Queued())
		}
	})
}
