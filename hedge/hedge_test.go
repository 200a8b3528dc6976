package hedge_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/hedge"
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestHedgeWins: the first attempt hangs for 1 s; the hedge, started after
// the 20 ms delay, answers in 10 ms: the call takes 30 ms, and the first
// attempt is canceled.
func TestHedgeWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := must(hedge.New(hedge.Settings{Delay: 20 * time.Millisecond}))
		var n atomic.Int32
		var mu sync.Mutex
		start := time.Now()
		var firstErr error
		err := p.Do(t.Context(), func(ctx context.Context) error {
			if n.Add(1) == 1 {
				err := sleepCtx(ctx, time.Second)
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return err
			}
			return sleepCtx(ctx, 10*time.Millisecond)
		})
		if err != nil || time.Since(start) != 30*time.Millisecond {
			t.Errorf("Do = %v after %v; want nil after 30ms", err, time.Since(start))
		}
		mu.Lock()
		defer mu.Unlock()
		if !errors.Is(firstErr, context.Canceled) {
			t.Errorf("first attempt ended with %v; want it canceled", firstErr)
		}
		if s := p.Stats(); s != (hedge.Stats{Calls: 1, Hedges: 1, Wins: 1}) {
			t.Errorf("Stats = %+v; want 1 call, 1 hedge, 1 win", s)
		}
	})
}

// TestFastCallNoHedge: an answer before the delay starts no hedge.
func TestFastCallNoHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := must(hedge.New(hedge.Settings{Delay: 20 * time.Millisecond}))
		for range 100 {
			if err := p.Do(t.Context(), func(ctx context.Context) error { return sleepCtx(ctx, 19*time.Millisecond) }); err != nil {
				t.Fatal(err)
			}
		}
		if s := p.Stats(); s.Hedges != 0 || s.Calls != 100 {
			t.Errorf("Stats = %+v; want 100 calls, no hedge", s)
		}
	})
}

// TestAllFail: when every attempt fails, the call returns the error of the
// attempt that ended last; the first failing fast ends the call before a
// hedge starts.
func TestAllFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := must(hedge.New(hedge.Settings{Delay: 20 * time.Millisecond}))
		var n atomic.Int32
		errFirst, errHedge := errors.New("first"), errors.New("hedge")
		err := p.Do(t.Context(), func(ctx context.Context) error {
			if n.Add(1) == 1 {
				_ = sleepCtx(ctx, 50*time.Millisecond)
				return errFirst
			}
			_ = sleepCtx(ctx, 40*time.Millisecond) // ends at 60 ms, last
			return errHedge
		})
		if err != errHedge {
			t.Errorf("Do = %v; want the last attempt's error", err)
		}
		start := time.Now()
		err = p.Do(t.Context(), func(ctx context.Context) error { return errFirst })
		if err != errFirst || time.Since(start) != 0 || p.Stats().Hedges != 1 {
			t.Errorf("Do = %v after %v, %d hedges; want the first error at once and no new hedge", err, time.Since(start), p.Stats().Hedges)
		}
	})
}

// TestMaxHedges: with MaxHedges 2, hedges start at 1 and 2 delays.
func TestMaxHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := must(hedge.New(hedge.Settings{Delay: 10 * time.Millisecond, MaxHedges: 2, Budget: 1}))
		start := time.Now()
		var (
			mu     sync.Mutex
			starts []time.Duration
		)
		var n atomic.Int32
		err := p.Do(t.Context(), func(ctx context.Context) error {
			k := n.Add(1)
			mu.Lock()
			starts = append(starts, time.Since(start))
			mu.Unlock()
			if k < 3 {
				return sleepCtx(ctx, time.Second)
			}
			return sleepCtx(ctx, 5*time.Millisecond)
		})
		if err != nil || time.Since(start) != 25*time.Millisecond || !slices.Equal(starts, []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond}) {
			t.Errorf("Do = %v after %v, attempts started at %v; want nil after 25ms, starts 0, 10ms, 20ms", err, time.Since(start), starts)
		}
	})
}

// TestBudget: 1,000 calls that all run past the delay make at most Burst +
// Budget × calls hedges (30 + 50), not 1,000.
func TestBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := must(hedge.New(hedge.Settings{Delay: time.Millisecond}))
		for range 1000 {
			_ = p.Do(t.Context(), func(ctx context.Context) error { return sleepCtx(ctx, 5*time.Millisecond) })
		}
		if h := p.Stats().Hedges; h < 75 || h > 80 {
			t.Errorf("%d hedges for 1,000 slow calls; want about 30 + 5 %% of 1,000", h)
		}
	})
}

// TestQuantileDelay: with Quantile 0.95, the delay follows the 95th
// percentile of the answers: 100 answers, 94 of 10 ms and 6 of 50 ms,
// make it about 10 ms (the bucket's bound).
func TestQuantileDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := must(hedge.New(hedge.Settings{Delay: 100 * time.Millisecond, Quantile: 0.95, MinSamples: 64}))
		for i := range 128 {
			d := 10 * time.Millisecond
			if i%25 == 0 {
				d = 50 * time.Millisecond // 4.7 %
			}
			_ = p.Do(t.Context(), func(ctx context.Context) error { return sleepCtx(ctx, d) })
		}
		if d := p.Delay(); d < 10*time.Millisecond || d > 12*time.Millisecond {
			t.Errorf("Delay = %v; want about 10ms (the p95 of the answers)", d)
		}
	})
}

// TestTailCut is the goal on a model of "The Tail at Scale": 1 % of
// calls are 100× slow (1 s instead of about 10 ms). Hedging after the
// observed p95 (within the default 5 % budget) cuts the p99.9 latency more
// than 10× at under 5 % extra load.
func TestTailCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const calls = 20000
		run := func(do func(context.Context, func(context.Context) error) error, seed uint64) (p999 time.Duration) {
			rng := rand.New(rand.NewPCG(seed, 1))
			var mu sync.Mutex
			lat := make([]time.Duration, 0, calls)
			for range calls {
				start := time.Now()
				_ = do(t.Context(), func(ctx context.Context) error {
					mu.Lock()
					d := time.Duration(8+rng.IntN(5)) * time.Millisecond
					if rng.IntN(100) == 0 {
						d *= 100
					}
					mu.Unlock()
					return sleepCtx(ctx, d)
				})
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			return lat[calls*999/1000]
		}
		plain := run(func(ctx context.Context, call func(context.Context) error) error { return call(ctx) }, 7)
		p := must(hedge.New(hedge.Settings{Delay: 50 * time.Millisecond, Quantile: 0.95}))
		hedged := run(p.Do, 7)
		s := p.Stats()
		extra := float64(s.Hedges) / float64(s.Calls)
		t.Logf("p99.9 %v unhedged, %v hedged (delay %v); %.2f %% extra attempts, %d hedges won", plain, hedged, p.Delay(), 100*extra, s.Wins)
		if plain < 10*hedged || extra > 0.05 {
			t.Errorf("p99.9 %v → %v at %.2f %% extra load; want a cut ≥ 10× at ≤ 5 %%", plain, hedged, 100*extra)
		}
	})
}

// TestNilCall: a nil call is an error, not a panic.
func TestNilCall(t *testing.T) {
	p := must(hedge.New(hedge.Settings{Delay: time.Millisecond}))
	if err := p.Do(t.Context(), nil); err == nil {
		t.Error("Do(nil) = nil; want an error")
	}
}

// TestSettingsErrors: each bad field is named.
func TestSettingsErrors(t *testing.T) {
	for _, tc := range []struct {
		s     hedge.Settings
		field string
	}{
		{hedge.Settings{}, "Delay"},
		{hedge.Settings{Delay: -1}, "Delay"},
		{hedge.Settings{Delay: 1, Quantile: 1}, "Quantile"},
		{hedge.Settings{Delay: 1, Quantile: -0.1}, "Quantile"},
		{hedge.Settings{Delay: 1, Window: -1}, "Window"},
		{hedge.Settings{Delay: 1, MinSamples: -1}, "MinSamples"},
		{hedge.Settings{Delay: 10, MinDelay: 5, MaxDelay: 4}, "MaxDelay"},
		{hedge.Settings{Delay: 1, MaxHedges: 17}, "MaxHedges"},
		{hedge.Settings{Delay: 1, Budget: 2}, "Budget"},
		{hedge.Settings{Delay: 1, Budget: -1}, "Budget"},
		{hedge.Settings{Delay: 1, Burst: -1}, "Burst"},
		{hedge.Settings{Delay: 1, Burst: 1e10}, "Burst"},
	} {
		_, err := hedge.New(tc.s)
		if err == nil || !strings.Contains(err.Error(), "Settings."+tc.field) {
			t.Errorf("New(%+v) = %v; want an error naming %s", tc.s, err, tc.field)
		}
	}
}

// TestAllocs: a call answered before the delay allocates only its
// attempt's cancelable context.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	p := must(hedge.New(hedge.Settings{Delay: time.Hour}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	call := func(context.Context) error { return nil }
	base := testing.AllocsPerRun(1000, func() {
		c, cancel := context.WithCancel(ctx)
		_ = call(c)
		cancel()
	})
	got := testing.AllocsPerRun(1000, func() { _ = p.Do(ctx, call) })
	if got > base {
		t.Errorf("Do allocates %v times a call; want no more than a context.WithCancel (%v)", got, base)
	}
}

// TestHedgePanics: a hedge that panics panics on the caller's goroutine,
// once every attempt has returned.
func TestHedgePanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := must(hedge.New(hedge.Settings{Delay: time.Millisecond}))
		var n atomic.Int32
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v; want the hedge's panic", v)
			}
		}()
		_ = p.Do(t.Context(), func(ctx context.Context) error {
			if n.Add(1) == 2 {
				panic("boom")
			}
			return sleepCtx(ctx, 10*time.Millisecond)
		})
		t.Error("Do returned; want a panic")
	})
}

// TestFirstAttemptPanics: when the first attempt panics on the caller's
// goroutine, the hedge running beside it is canceled and has returned
// before the panic goes on.
func TestFirstAttemptPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := must(hedge.New(hedge.Settings{Delay: time.Millisecond}))
		var hedgeDone atomic.Bool
		func() {
			defer func() {
				if v := recover(); v != "boom" {
					t.Errorf("recovered %v; want the first attempt's panic", v)
				}
				if !hedgeDone.Load() {
					t.Error("the hedge was still running when the panic reached the caller")
				}
			}()
			var n atomic.Int32
			_ = p.Do(t.Context(), func(ctx context.Context) error {
				if n.Add(1) == 2 {
					err := sleepCtx(ctx, time.Hour)
					hedgeDone.Store(true)
					return err
				}
				time.Sleep(5 * time.Millisecond) // the hedge has started
				panic("boom")
			})
		}()
	})
}

// TestRefusedHedgeAside: a hedge refused before it was sent (a local
// rejection) neither becomes the call's error nor spends the budget; the
// call's error is the first attempt's, which ended last.
func TestRefusedHedgeAside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := must(hedge.New(hedge.Settings{Delay: 10 * time.Millisecond}))
		errFirst := errors.New("first")
		var n atomic.Int32
		err := p.Do(t.Context(), func(ctx context.Context) error {
			if n.Add(1) == 2 {
				return refused{}
			}
			_ = sleepCtx(ctx, 50*time.Millisecond)
			return errFirst
		})
		if err != errFirst || p.Stats().Hedges != 0 {
			t.Errorf("Do = %v, %d hedges; want the first attempt's error and the refused hedge not counted", err, p.Stats().Hedges)
		}
	})
}

// TestLastErrorByTime: the hedge fails at 30 ms, the first attempt at
// 100 ms: the call's error is the first attempt's, which ended last.
func TestLastErrorByTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := must(hedge.New(hedge.Settings{Delay: 20 * time.Millisecond}))
		errFirst, errHedge := errors.New("first"), errors.New("hedge")
		var n atomic.Int32
		err := p.Do(t.Context(), func(ctx context.Context) error {
			if n.Add(1) == 2 {
				_ = sleepCtx(ctx, 10*time.Millisecond)
				return errHedge
			}
			_ = sleepCtx(ctx, 100*time.Millisecond)
			return errFirst
		})
		if err != errFirst {
			t.Errorf("Do = %v; want the error of the attempt that ended last (the first)", err)
		}
	})
}

// refused is a local rejection.
type refused struct{}

func (refused) Error() string        { return "refused" }
func (refused) Is(target error) bool { return target == callguard.ErrRejected }
