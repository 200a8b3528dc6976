package limit_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/limit"
)

// TestGradient2LatencyShift: a downstream whose round trip moves from 2 ms
// to 100 ms with its capacity intact (no queue: any number of calls in
// flight answers in 100 ms), 20 callers each with a little work of its
// own between calls. Gradient2's long-term average takes hundreds of
// samples to follow; before the fall's judgement the limit fell to 8 and
// refused 10,443 of the 12,011 calls made after the shift, each caller
// trying again after its bit of work (over real sockets: 395 of 1,278
// calls refused under +100 ms of latency). Its fall now holds at 0.6 of
// where it began, and the round trips staying as they were there, it goes
// back: no call refused.
func TestGradient2LatencyShift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustLimiter(t, limit.Settings{})
		start := time.Now()
		var mu sync.Mutex
		var calls, refused, lowest = 0, 0, 1 << 30
		var wg sync.WaitGroup
		for i := range 20 {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			wg.Go(func() {
				for time.Since(start) < 12*time.Second {
					shifted := time.Since(start) >= 3*time.Second
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					err := l.Do(ctx, func(context.Context) error {
						d := 2 * time.Millisecond
						if shifted {
							d = 100 * time.Millisecond
						}
						time.Sleep(d)
						return nil
					})
					cancel()
					if shifted {
						mu.Lock()
						calls++
						lowest = min(lowest, l.Limit())
						if err != nil {
							refused++
						}
						mu.Unlock()
					}
					time.Sleep(time.Duration(rng.Int64N(int64(4 * time.Millisecond)))) // the caller's own work
				}
			})
		}
		wg.Wait()
		if refused > 0 {
			t.Errorf("%d of %d calls refused after the round trip moved (the limit as low as %d), want none", refused, calls, lowest)
		}
	})
}
