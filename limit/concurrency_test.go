package limit_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/limit"
)

// TestConcurrentBulkhead: under contention the bulkhead never has more
// than MaxConcurrent calls running, every call is admitted, rejected or
// ended by its context, and everything is released at the end.
func TestConcurrentBulkhead(t *testing.T) {
	b := mustBulkhead(t, limit.BulkheadSettings{MaxConcurrent: 4, MaxQueue: 8, MaxWait: 2 * time.Millisecond})
	var running, peak, ran, rejected, ended atomic.Int64
	call := func(context.Context) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(50 * time.Microsecond)
		running.Add(-1)
		ran.Add(1)
		return nil
	}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 200 {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if (g+i)%7 == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Millisecond)
				}
				err := b.Do(ctx, call)
				cancel()
				switch {
				case err == nil:
				case errors.Is(err, limit.ErrLimited):
					rejected.Add(1)
				case errors.Is(err, context.DeadlineExceeded):
					ended.Add(1)
				default:
					t.Errorf("Do: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 4 {
		t.Errorf("peak concurrency %d, want <= 4", p)
	}
	if total := ran.Load() + rejected.Load() + ended.Load(); total != 32*200 {
		t.Errorf("ran %d + rejected %d + ended %d = %d, want %d", ran.Load(), rejected.Load(), ended.Load(), total, 32*200)
	}
	if b.InFlight() != 0 || b.Queued() != 0 {
		t.Errorf("InFlight, Queued = %d, %d after the run; want 0, 0", b.InFlight(), b.Queued())
	}
	t.Logf("ran %d, rejected %d, ended by context %d", ran.Load(), rejected.Load(), ended.Load())
}

// TestConcurrentLimiter: the limit moves under contention (drops and
// successes) and stays within [MinLimit, MaxLimit]; calls in flight never
// exceed MaxLimit; everything is released at the end.
func TestConcurrentLimiter(t *testing.T) {
	for _, alg := range []limit.Algorithm{limit.AIMD(limit.AIMDSettings{}), limit.Gradient2(limit.Gradient2Settings{})} {
		l := mustLimiter(t, limit.Settings{Algorithm: alg, InitialLimit: 8, MinLimit: 2, MaxLimit: 16, MaxQueue: 16, MaxWait: time.Millisecond})
		var running, peak, n atomic.Int64
		call := func(context.Context) error {
			r := running.Add(1)
			for {
				p := peak.Load()
				if r <= p || peak.CompareAndSwap(p, r) {
					break
				}
			}
			defer running.Add(-1)
			time.Sleep(20 * time.Microsecond)
			if n.Add(1)%5 == 0 {
				return errTimeout
			}
			return nil
		}
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for range 200 {
					if err := l.Do(context.Background(), call); err != nil && !errors.Is(err, limit.ErrLimited) && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Do: %v", err)
					}
					if lim := l.Limit(); lim < 2 || lim > 16 {
						t.Errorf("Limit() = %d, outside [2, 16]", lim)
					}
				}
			})
		}
		wg.Wait()
		if p := peak.Load(); p > 16 {
			t.Errorf("%v: peak concurrency %d, want <= MaxLimit 16", alg, p)
		}
		if l.InFlight() != 0 || l.Queued() != 0 {
			t.Errorf("%v: InFlight, Queued = %d, %d after the run; want 0, 0", alg, l.InFlight(), l.Queued())
		}
	}
}

// TestNoLostWakeup: with MaxWait 0 and contexts that never end, a waiter
// whose hand-off were lost would wait forever. Many goroutines race the
// lock-free releases against arrivals that queue, with the limit moving
// (AIMD) or fixed (bulkhead); every call must be admitted.
func TestNoLostWakeup(t *testing.T) {
	b := mustBulkhead(t, limit.BulkheadSettings{MaxConcurrent: 2, MaxQueue: 64})
	l := mustLimiter(t, limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{}), InitialLimit: 3, MinLimit: 1, MaxLimit: 6, MaxQueue: 64})
	for name, p := range map[string]interface {
		Do(context.Context, func(context.Context) error) error
		InFlight() int
		Queued() int
	}{"bulkhead": b, "limiter": l} {
		var n atomic.Int64
		var queued atomic.Int64
		call := func(context.Context) error {
			runtime.Gosched() // others arrive while the slot is held, and queue
			if p.Queued() > 0 {
				queued.Add(1)
			}
			if n.Add(1)%3 == 0 {
				return errTimeout
			}
			return nil
		}
		done := make(chan struct{})
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for range 300 {
					if err := p.Do(context.Background(), call); err != nil && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("%s: Do: %v", name, err)
					}
				}
			})
		}
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: stuck with %d in flight, %d queued", name, p.InFlight(), p.Queued())
		}
		if p.InFlight() != 0 || p.Queued() != 0 {
			t.Errorf("%s: InFlight, Queued = %d, %d; want 0, 0", name, p.InFlight(), p.Queued())
		}
		if queued.Load() == 0 {
			t.Errorf("%s: no call ever queued: the test tests nothing", name)
		}
	}
}
