package limit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/limit"
)

func noop(context.Context) error { return nil }

// TestZeroAllocs: admission and release allocate nothing when the call
// does not wait, for both policies and both algorithms; nor does waiting
// in the queue once the waiter pool is warm.
func TestZeroAllocs(t *testing.T) {
	ctx := context.Background()
	b := mustBulkhead(t, limit.BulkheadSettings{MaxConcurrent: 4, MaxQueue: 4, MaxWait: time.Second})
	aimd := mustLimiter(t, limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{}), MaxQueue: 4})
	g2 := mustLimiter(t, limit.Settings{MaxQueue: 4})
	for name, p := range map[string]interface {
		Acquire(context.Context) (limit.Permit, error)
		Do(context.Context, func(context.Context) error) error
	}{"bulkhead": b, "AIMD": aimd, "Gradient2": g2} {
		if n := testing.AllocsPerRun(1000, func() {
			pm, err := p.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pm.Done(nil)
		}); n != 0 {
			t.Errorf("%s: Acquire+Done: %v allocs, want 0", name, n)
		}
		if n := testing.AllocsPerRun(1000, func() { _ = p.Do(ctx, noop) }); n != 0 {
			t.Errorf("%s: Do: %v allocs, want 0", name, n)
		}
	}
	// The queued path: one slot, a waiter that gets it when the holder
	// releases.
	q := mustBulkhead(t, limit.BulkheadSettings{MaxConcurrent: 1, MaxQueue: 1, MaxWait: time.Second})
	held, _ := q.Acquire(ctx)
	got := make(chan limit.Permit)
	var wg sync.WaitGroup
	wg.Add(1)
	var stop atomic.Bool
	go func() {
		defer wg.Done()
		for !stop.Load() {
			p, err := q.Acquire(ctx)
			if err != nil {
				continue
			}
			got <- p
		}
	}()
	n := testing.AllocsPerRun(200, func() {
		for q.Queued() == 0 {
			time.Sleep(time.Microsecond)
		}
		held.Done(nil)
		held = <-got
	})
	stop.Store(true)
	held.Done(nil)
	select {
	case p := <-got:
		p.Done(nil)
	case <-time.After(2 * time.Second):
	}
	wg.Wait()
	t.Logf("queued path: %v allocs per wait", n)
	if n > 0.1 && !raceEnabled {
		t.Errorf("queued path: %v allocs per wait, want 0 with a warm pool", n)
	}
}
