package timeout_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/timeout"
)

// load runs callers goroutines that call p.Do in a closed loop for d of
// (virtual) time. Each call draws its latency with lat (negative: it hangs
// until its context ends). after, if not nil, sees each call's start,
// latency and result, one call at a time.
func load(p *timeout.Policy, callers int, d time.Duration, seed uint64, lat func(*rand.Rand) time.Duration, after func(start time.Time, lat time.Duration, err error)) {
	var mu sync.Mutex
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range callers {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Go(func() {
			for time.Now().Before(end) {
				l := lat(rng)
				start := time.Now()
				err := p.Do(context.Background(), func(ctx context.Context) error {
					if l < 0 {
						<-ctx.Done()
						return ctx.Err()
					}
					t := time.NewTimer(l)
					defer t.Stop()
					select {
					case <-t.C:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				})
				if after != nil {
					mu.Lock()
					after(start, l, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
}

// lognormal draws latencies with a median of 20 ms and a p99 of 200 ms.
func lognormal(r *rand.Rand) time.Duration {
	const z99 = 2.3263478740408408 // the standard normal's 0.99 quantile
	sigma := math.Log(10) / z99
	return time.Duration(float64(20*time.Millisecond) * math.Exp(sigma*r.NormFloat64()))
}

// quantile is the q-quantile of the latencies: the smallest with at least q
// of them at or below it.
func quantile(lats []time.Duration, q float64) time.Duration {
	s := slices.Clone(lats)
	slices.Sort(s)
	return s[max(int(math.Ceil(float64(len(s))*q))-1, 0)]
}

// bucketSlack is how far above a latency the adaptive timeout's histogram
// may place it: its buckets are 1/8 of a power of two wide.
const bucketSlack = 1.125

// TestAdaptiveBlackhole is issue #21: after a healthy warm-up, every call
// hangs until the timeout cuts it, for 60 s (a whole window). A cut call
// tells only that the latency was at least the timeout; recorded at the
// timeout, each one pushed the estimate up, and the timeout compounded to
// Max within seconds. It must stay where the warm-up put it.
func TestAdaptiveBlackhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := timeout.New(300*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		hi := bridge.TimeoutOf(p).Max
		load(p, 50, 20*time.Second, 1, lognormal, nil)
		warm := p.Timeout()
		start := time.Now()
		lo, top, cut, calls := warm, warm, 0, 0
		atMax := time.Duration(-1) // when it reached Max, if it did
		load(p, 50, time.Minute, 2, func(*rand.Rand) time.Duration { return -1 }, func(_ time.Time, _ time.Duration, err error) {
			calls++
			if timeout.Expired(err) {
				cut++
			}
			now := p.Timeout()
			lo, top = min(lo, now), max(top, now)
			if now == hi && atMax < 0 {
				atMax = time.Since(start)
			}
		})
		t.Logf("after the warm-up %v; during 60 s of blackhole %v–%v (Max %v, reached after %v); %d of %d calls cut by the timeout",
			warm, lo, top, hi, atMax, cut, calls)
		if lo != warm || top != warm {
			t.Errorf("got a timeout of %v–%v during the blackhole, want %v throughout (where the warm-up put it)", lo, top, warm)
		}
		if cut != calls {
			t.Errorf("got %d of %d calls cut by the timeout, want all", cut, calls)
		}
	})
}

// TestAdaptiveFifthHangs is issue #21 with 20 % of the calls hanging and
// the rest answering with p50 20 ms and p99 200 ms: the timeout follows
// the answers (p99.9 × 1.5) and does not drift over 60 s. Before, every
// hang cut at the timeout pushed it up, to Max.
func TestAdaptiveFifthHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := timeout.New(300*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		var healthy []time.Duration
		lat := func(r *rand.Rand) time.Duration {
			if r.Float64() < 0.2 {
				return -1
			}
			return lognormal(r)
		}
		record := func(_ time.Time, l time.Duration, _ error) {
			if l >= 0 {
				healthy = append(healthy, l)
			}
		}
		load(p, 50, 10*time.Second, 3, lat, record) // settle
		settled := p.Timeout()
		lo, hi := settled, settled
		var firstHalf, secondHalf time.Duration // the highest value in each 30 s
		start := time.Now()
		load(p, 50, time.Minute, 4, lat, func(s time.Time, l time.Duration, err error) {
			record(s, l, err)
			now := p.Timeout()
			lo, hi = min(lo, now), max(hi, now)
			if time.Since(start) < 30*time.Second {
				firstHalf = max(firstHalf, now)
			} else {
				secondHalf = max(secondHalf, now)
			}
		})
		q := quantile(healthy, 0.999)
		bound := time.Duration(1.5 * bucketSlack * float64(q))
		t.Logf("healthy p99.9 %v over %d answers; timeout %v after 10 s, then %v–%v over 60 s (highest %v in the first 30 s, %v in the last)",
			q, len(healthy), settled, lo, hi, firstHalf, secondHalf)
		if hi > bound || lo < q {
			t.Errorf("got a timeout of %v–%v, want within [p99.9, 1.5 × p99.9 × %v] = [%v, %v]", lo, hi, bucketSlack, q, bound)
		}
		// No drift: a histogram bucket's width at most between the halves.
		if r := float64(secondHalf) / float64(firstHalf); r > bucketSlack || r < 1/bucketSlack {
			t.Errorf("got a highest timeout of %v in the first 30 s and %v in the last, want them within a factor %v", firstHalf, secondHalf, bucketSlack)
		}
	})
}

// TestAdaptiveGrowsFromTooShort: a timeout that starts too short still
// finds the tail. At 100 ms on a healthy downstream whose calls take
// 10–100 ms, and 20 % of them 100 ms–1 s, it cuts a fifth of the calls,
// far more than its quantile allows: its scout, let run to Max, answers,
// and the timeout rises to that answer × Multiplier; the answers then pile
// up just under it, so each recompute raises it further, never past
// Multiplier (and a histogram bucket) × the longest answer seen, until no
// healthy call is cut; once the slow calls stop, it comes back down.
func TestAdaptiveGrowsFromTooShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const mult = 1.5
		p, err := timeout.New(100*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{
			Multiplier: mult, Min: 20 * time.Millisecond, Max: 5 * time.Second, Window: 10 * time.Second,
		}))
		if err != nil {
			t.Fatal(err)
		}
		tail := func(r *rand.Rand) time.Duration {
			if r.Float64() < 0.2 {
				return 100*time.Millisecond + time.Duration(r.Int64N(int64(900*time.Millisecond)))
			}
			return 10*time.Millisecond + time.Duration(r.Int64N(int64(90*time.Millisecond)))
		}
		var longest, lastCut, prev time.Duration
		var steps []float64
		var above []string // values past Multiplier × bucket × the longest answer then
		prev = p.Timeout()
		start := time.Now()
		cut := 0
		load(p, 10, 30*time.Second, 5, tail, func(_ time.Time, l time.Duration, err error) {
			longest = max(longest, l)
			if timeout.Expired(err) {
				cut++
				lastCut = time.Since(start)
			}
			if now := p.Timeout(); now != prev {
				steps = append(steps, float64(now)/float64(prev))
				prev = now
				if now > time.Duration(mult*bucketSlack*float64(longest)) {
					above = append(above, fmt.Sprintf("%v with the longest answer %v", now, longest))
				}
			}
		})
		grown := p.Timeout()
		t.Logf("from 100ms to %v (longest call %v); %d calls cut, the last at %v; changes by ×%.3f",
			grown, longest, cut, lastCut.Round(time.Millisecond), steps)
		if grown <= longest || grown > time.Duration(mult*bucketSlack*float64(longest)) {
			t.Errorf("got a timeout of %v, want above the longest healthy call (%v), at most %v × %v × it", grown, longest, mult, bucketSlack)
		}
		if lastCut > 20*time.Second {
			t.Errorf("got a healthy call cut at %v, want none in the last 10 s", lastCut)
		}
		if len(above) > 0 {
			t.Errorf("got timeouts %v, want none above %v × %v × the longest answer seen", above, mult, bucketSlack)
		}
		// The slow calls stop: it follows the answers back down.
		var fast []time.Duration
		load(p, 10, 30*time.Second, 6, func(r *rand.Rand) time.Duration {
			return 10*time.Millisecond + time.Duration(r.Int64N(int64(90*time.Millisecond)))
		}, func(_ time.Time, l time.Duration, _ error) { fast = append(fast, l) })
		q := quantile(fast, 0.999)
		if got := p.Timeout(); got < q || got > time.Duration(mult*bucketSlack*float64(q)) {
			t.Errorf("got a timeout of %v on calls of p99.9 %v, want within [p99.9, %v × %v × p99.9]", got, q, mult, bucketSlack)
		} else {
			t.Logf("after the slow calls stop: %v (p99.9 %v)", got, q)
		}
	})
}

// TestAdaptiveGrowsOverAGap: a tail with a gap above the timeout (10 % of
// the calls at 800 ms, the rest at 30 ms, under a 100 ms timeout) has no
// answers just under the timeout to make it grow, and looks, to the cut
// calls alone, like 10 % of the calls hanging. Its scout, let run to Max,
// answers at 800 ms: the timeout rises to 1.2 s (800 ms × 1.5) at once,
// and cuts no slow call after; TestAdaptiveFifthHangs is the same share
// hanging, where it stays put.
func TestAdaptiveGrowsOverAGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := timeout.New(100*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{
			Min: 20 * time.Millisecond, Max: 5 * time.Second, Window: 10 * time.Second,
		}))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var lastCut time.Duration
		cut := 0
		load(p, 10, 20*time.Second, 3, func(r *rand.Rand) time.Duration {
			if r.Float64() < 0.1 {
				return 800 * time.Millisecond
			}
			return 30 * time.Millisecond
		}, func(_ time.Time, _ time.Duration, err error) {
			if timeout.Expired(err) {
				cut++
				lastCut = time.Since(start)
			}
		})
		got := p.Timeout()
		t.Logf("timeout %v after 20 s; %d calls cut, the last at %v", got, cut, lastCut.Round(time.Millisecond))
		if got < 800*time.Millisecond || got > 1500*time.Millisecond {
			t.Errorf("got a timeout of %v, want above the 800 ms calls, at most 1.5 × 1.125 × them", got)
		}
		if lastCut > 2*time.Second {
			t.Errorf("got a slow call cut at %v, want none after the first scout's answer (under 2 s)", lastCut)
		}
	})
}

// TestAdaptiveFollowsAShiftAtOnce: answers that come close to the timeout
// (past 2/3 of it) make it recompute at once, not every 64 answers: after
// a steady 180 ms (a timeout of 270 ms), answers at 250 ms raise it within
// a few of them.
func TestAdaptiveFollowsAShiftAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := timeout.New(300*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{Quantile: 0.99}))
		if err != nil {
			t.Fatal(err)
		}
		answer := func(d time.Duration) {
			_ = p.Do(context.Background(), func(ctx context.Context) error {
				time.Sleep(d)
				return nil
			})
		}
		for range 200 {
			answer(180 * time.Millisecond)
		}
		steady := p.Timeout()
		for range 5 {
			answer(250 * time.Millisecond)
		}
		if got := p.Timeout(); got <= steady || steady > 300*time.Millisecond {
			t.Errorf("after 200 answers at 180ms the timeout is %v; after 5 at 250ms, %v: want it higher at once", steady, got)
		}
	})
}
