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

// openLoad sends a call through l every 2.5 ms (400 a second, an open
// loop: arrivals do not wait for answers) for 12 s, to a downstream with no
// queue that answers a call started at since after rtt(since); it returns
// the calls refused from 3 s on, and how many were made then.
func openLoad(t *testing.T, l *limit.Limiter, rtt func(since time.Duration, rng *rand.Rand) time.Duration) (refused, calls int) {
	t.Helper()
	start := time.Now()
	rng := rand.New(rand.NewPCG(11, 9))
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(2500 * time.Microsecond)
	defer tick.Stop()
	for since := time.Duration(0); since < 12*time.Second; since = time.Since(start) {
		<-tick.C
		d := rtt(since, rng)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := l.Do(ctx, func(context.Context) error {
				time.Sleep(d)
				return nil
			})
			if since >= 3*time.Second {
				mu.Lock()
				calls++
				if err != nil {
					refused++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return refused, calls
}

// TestGradient2LateShare: 400 calls a second; from 3 s on, one answer in
// ten comes 500-800 ms late, the others in 2 ms, with the capacity intact
// (no queue): some 26 calls in flight against a limit of 20. The mean
// of the last ten samples jumps with each late one, and the gradient fell
// with it: the limit refused calls the downstream would have answered. The
// gradient reads their median: a share of late answers is not a queue.
func TestGradient2LateShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustLimiter(t, limit.Settings{})
		refused, calls := openLoad(t, l, func(since time.Duration, rng *rand.Rand) time.Duration {
			if since >= 3*time.Second && rng.Float64() < 0.1 {
				return 500*time.Millisecond + time.Duration(rng.Int64N(int64(300*time.Millisecond)))
			}
			return 2 * time.Millisecond
		})
		if refused > 0 {
			t.Errorf("%d of %d calls refused with one answer in ten late, want none", refused, calls)
		}
	})
}

// TestGradient2ClientStall: 400 calls a second; from 3 s on, the
// client's host stalls for 250 ms every 2 s: an answer due in a stall is
// seen at its end. Calls go
// on arriving meanwhile, and the calls in flight pile up past the limit
// while no answer says anything of the downstream: a limit that refuses
// past its count refused them. It refuses past its count only while its
// samples say the round trips are rising (the gradient below 1); without
// that, it admits up to MaxLimit.
func TestGradient2ClientStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustLimiter(t, limit.Settings{})
		const every, stall = 2 * time.Second, 250 * time.Millisecond
		refused, calls := openLoad(t, l, func(since time.Duration, rng *rand.Rand) time.Duration {
			d := 2 * time.Millisecond
			if since < 3*time.Second {
				return d
			}
			if at := (since + d) % every; at < stall {
				d += stall - at
			}
			return d
		})
		// At a stall's end the late answers all come at one instant, with
		// new calls: in whichever order they meet, a few calls may find
		// the gradient just fallen (0 to 7 of 3,600 over runs).
		if 100*refused > calls {
			t.Errorf("%d of %d calls refused with the client stalling, want at most 1 %%", refused, calls)
		}
	})
}
