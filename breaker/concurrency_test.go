package breaker

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var errFail = errors.New("fail")

// TestConcurrentInvariants drives 64 goroutines through every state, with
// both the one-step and the two-step API: within one half-open episode no
// more than HalfOpenProbes probes are ever in flight, and once all calls
// are done the counts conserve.
func TestConcurrentInvariants(t *testing.T) {
	for _, engine := range []Engine{EngineNative, EngineGobreaker} {
		t.Run(engine.String(), func(t *testing.T) {
			// The invariants are checked on every run; a run on a loaded
			// machine may race through its phases without reaching every
			// state, and is then made again (up to 3 runs).
			for run := 1; !concurrentRun(t, engine, run == 3); run++ {
			}
		})
	}
}

// concurrentRun drives one workload and checks its invariants; it reports
// whether the workload reached every state (an error if not and last).
func concurrentRun(t *testing.T, engine Engine, last bool) (covered bool) {
	const probes = 3
	var transitions atomic.Int64
	b, err := New(Settings{
		ConsecutiveFailures: 5,
		FailureRate:         0.5,
		Window:              50 * time.Millisecond,
		MinCalls:            10,
		HalfOpenProbes:      probes,
		OpenTimeout:         time.Millisecond,
		Engine:              engine,
		OnStateChange:       func(from, to State) { transitions.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	inflight := map[*gen]int{}
	maxInflight := 0
	var calls, admitted atomic.Int64
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			ctx := context.Background()
			for i := 0; i < 3000 && time.Now().Before(deadline); i++ {
				// Phases of 100 calls: healthy, failing, flaky, or
				// cancelled by the caller.
				phase := (i / 100) % 4
				outcome := func() error {
					switch {
					case phase == 1, phase == 2 && r.IntN(2) == 0:
						return errFail
					}
					return nil
				}
				calls.Add(1)
				cctx := ctx
				if phase == 3 && r.IntN(4) == 0 {
					c, cancel := context.WithCancel(ctx)
					cancel()
					cctx = c
				}
				p, err := b.Allow(cctx)
				if err != nil {
					if !errors.Is(err, ErrOpen) {
						t.Errorf("rejection %v does not match ErrOpen", err)
					}
					continue
				}
				admitted.Add(1)
				probe := p.g != nil && p.g.state == StateHalfOpen
				if probe {
					mu.Lock()
					inflight[p.g]++
					maxInflight = max(maxInflight, inflight[p.g])
					mu.Unlock()
				}
				if r.IntN(8) == 0 {
					time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
				}
				err = outcome()
				if phase == 3 && cctx != ctx {
					err = context.Canceled
				}
				if probe {
					mu.Lock()
					inflight[p.g]--
					mu.Unlock()
				}
				p.Done(err)
			}
		})
	}
	wg.Wait()
	c := b.Counts()
	if maxInflight > probes {
		t.Errorf("%d probes in flight in one half-open episode, want ≤ %d", maxInflight, probes)
	}
	// Every call ends as exactly one success, failure, neutral or
	// rejection.
	if sum := c.Successes + c.Failures + c.SlowUnanswered + c.Neutral + c.RejectedOpen + c.RejectedProbes; sum != uint64(calls.Load()) || sum != c.Requests {
		t.Errorf("successes+failures+slow unanswered+neutral+rejections = %d, want %d calls and Requests: %+v", sum, calls.Load(), c)
	}
	if got := c.Successes + c.Failures + c.SlowUnanswered + c.Neutral; got != uint64(admitted.Load()) {
		t.Errorf("outcomes %d, admitted %d", got, admitted.Load())
	}
	t.Logf("%v: %+v, %d transitions, max %d probes in flight", engine, c, transitions.Load(), maxInflight)
	covered = c.Opens > 0 && c.RejectedOpen > 0 && transitions.Load() >= 3 && c.Neutral > 0 &&
		(engine != EngineNative || c.Probes > 0 && maxInflight > 0)
	if !covered && last {
		t.Errorf("in 3 runs the workload did not reach every state: %+v, %d transitions, max %d probes in flight", c, transitions.Load(), maxInflight)
	}
	return covered || last
}
