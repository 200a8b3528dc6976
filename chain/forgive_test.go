package chain_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/timeout"
)

// TestScoutForgivesTheBreaker: a breaker (3 in a row, open 1 s) over an
// adaptive attempt timeout sunk to its floor (10 ms) on 1 ms answers; the
// downstream gets 50 times slower and stays healthy. Its cut attempts open
// the breaker; at its probes, the timeout's scout (one probe, run to Max)
// answers in 50 ms: the timeout rises to 75 ms, and the breaker, opened by
// attempts that were slow answers, closes at once (the other probes, cut
// at 10 ms, have reopened it meanwhile) and stays closed. Without the
// scout the breaker would reopen on each round of probes.
func TestScoutForgivesTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var changes []string
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: time.Second,
			OnStateChange: func(from, to breaker.State) {
				mu.Lock()
				changes = append(changes, to.String())
				mu.Unlock()
			}}))
		attempt := must(timeout.New(100*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{
			Quantile: 0.99, Min: 10 * time.Millisecond, Max: time.Second, Window: 5 * time.Second,
		})))
		c := must(chain.New(b, attempt))
		start := time.Now()
		slow := 2 * time.Second
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for time.Since(start) < 6*time.Second {
					d := time.Millisecond
					if time.Since(start) >= slow {
						d = 50 * time.Millisecond
					}
					err := c.Do(context.Background(), func(ctx context.Context) error {
						select {
						case <-time.After(d):
							return nil
						case <-ctx.Done():
							return ctx.Err()
						}
					})
					if err != nil {
						time.Sleep(10 * time.Millisecond)
					}
				}
			})
		}
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if got := attempt.Timeout(); got < 75*time.Millisecond {
			t.Errorf("attempt timeout %v after the slowdown, want at least 75ms (50 ms × 1.5)", got)
		}
		// open (the cuts), half-open, open (a probe cut), closed (the
		// scout's answer): once, and no more.
		want := []string{"open", "half-open", "open", "closed"}
		if b.State() != breaker.StateClosed || !slices.Equal(changes, want) {
			t.Errorf("breaker %v after the transitions %v, want %v", b.State(), changes, want)
		}
		t.Logf("transitions %v; attempt timeout %v", changes, attempt.Timeout())
	})
}
