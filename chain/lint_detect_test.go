package chain_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
)

// TestMeasuredCG004CallerDeadline: retry(5) → breaker(50 % of 10 s) →
// timeout(10 s), its callers giving each request 1 s (issue 22's chain).
// The lint says a hung downstream never counts as failing: every hung
// attempt is cut at the callers' deadline before it has run the printed
// patience. Measured in virtual time, 20 callers for 30 s against a
// downstream that hangs: the breaker never opens, each request waits out
// its whole deadline and makes one attempt of 5. A deadline just past the
// printed patience opens it.
func TestMeasuredCG004CallerDeadline(t *testing.T) {
	build := func(deadline time.Duration, opened *atomic.Int64) *chain.Chain {
		s := breaker.Settings{FailureRate: 0.5, OnStateChange: func(_, to breaker.State) {
			if to == breaker.StateOpen {
				opened.Add(1)
			}
		}}
		return must(chain.Options{CallerDeadline: deadline}.New(rt(retry.MaxAttempts(5)), br(s), to(10*time.Second)))
	}
	var none atomic.Int64
	claim, _ := lintClaim(t, build(time.Second, &none), "CG004")
	cut := parseDur(t, match(t, `ends every hung attempt at (`+durPat+`)`, claim)[1])
	patience := parseDur(t, match(t, `once it has run (`+durPat+`)`, claim)[1])
	unmade := count(t, claim, "of its 5 attempts never made")
	if cut != time.Second || unmade != 4 {
		t.Fatalf("the claim: cut at %v, %d of 5 attempts never made; want the callers' 1s and 4:\n%s", cut, unmade, claim)
	}
	for _, tc := range []struct {
		deadline time.Duration
		opens    bool
	}{{cut, false}, {patience + time.Millisecond, true}} {
		synctest.Test(t, func(t *testing.T) {
			var opened atomic.Int64
			c := build(tc.deadline, &opened)
			var calls, requests atomic.Int64
			var mu sync.Mutex
			held := map[time.Duration]int{}
			start := time.Now()
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					for time.Since(start) < 30*time.Second && opened.Load() == 0 {
						ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
						t0 := time.Now()
						_ = c.Do(ctx, func(ctx context.Context) error { calls.Add(1); return hung(ctx) })
						cancel()
						requests.Add(1)
						mu.Lock()
						held[time.Since(t0)]++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if got := opened.Load() > 0; got != tc.opens {
				t.Fatalf("deadline %v: the breaker opened %d times; want it to open: %t", tc.deadline, opened.Load(), tc.opens)
			}
			if tc.opens {
				return
			}
			if len(held) != 1 || held[tc.deadline] == 0 {
				t.Errorf("deadline %v: requests held their callers %v; want every one its whole deadline", tc.deadline, held)
			}
			if calls.Load() != requests.Load() {
				t.Errorf("deadline %v: %d downstream calls for %d requests; want the first attempt only", tc.deadline, calls.Load(), requests.Load())
			}
			t.Logf("deadline %v: %d requests in 30 s, none let the breaker open; each held %v", tc.deadline, requests.Load(), held)
		})
	}
}
