package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
)

type event struct {
	at       time.Duration
	from, to breaker.State
}

func (e event) String() string { return fmt.Sprintf("%v→%v@%v", e.from, e.to, e.at) }

var errDown = errors.New("downstream down")

// TestSeedAScript replays SEEDS A: a call every 50 ms for 160 calls, the
// downstream failing in [500 ms, 2000 ms) and [4000 ms, 5500 ms), 5
// consecutive failures trip, 3 probes, open 1025 ms.
func TestSeedAScript(t *testing.T) {
	want := []event{
		{700 * time.Millisecond, breaker.StateClosed, breaker.StateOpen},
		{1750 * time.Millisecond, breaker.StateOpen, breaker.StateHalfOpen},
		{1750 * time.Millisecond, breaker.StateHalfOpen, breaker.StateOpen},
		{2800 * time.Millisecond, breaker.StateOpen, breaker.StateHalfOpen},
		{2900 * time.Millisecond, breaker.StateHalfOpen, breaker.StateClosed},
		{4200 * time.Millisecond, breaker.StateClosed, breaker.StateOpen},
		{5250 * time.Millisecond, breaker.StateOpen, breaker.StateHalfOpen},
		{5250 * time.Millisecond, breaker.StateHalfOpen, breaker.StateOpen},
		{6300 * time.Millisecond, breaker.StateOpen, breaker.StateHalfOpen},
		{6400 * time.Millisecond, breaker.StateHalfOpen, breaker.StateClosed},
	}
	for _, engine := range []breaker.Engine{breaker.EngineNative, breaker.EngineGobreaker} {
		t.Run(engine.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var got []event
				b, err := breaker.New(breaker.Settings{
					ConsecutiveFailures: 5,
					HalfOpenProbes:      3,
					OpenTimeout:         1025 * time.Millisecond,
					Engine:              engine,
					OnStateChange: func(from, to breaker.State) {
						got = append(got, event{time.Since(start), from, to})
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				var reached, failed, rejectedOpen, rejectedQuota int
				for i := range 160 {
					err := b.Do(context.Background(), func(context.Context) error {
						reached++
						at := time.Since(start)
						if (at >= 500*time.Millisecond && at < 2000*time.Millisecond) ||
							(at >= 4000*time.Millisecond && at < 5500*time.Millisecond) {
							failed++
							return errDown
						}
						return nil
					})
					switch {
					case errors.Is(err, breaker.ErrTooManyProbes):
						rejectedQuota++
					case errors.Is(err, breaker.ErrOpen):
						rejectedOpen++
					}
					if i < 159 {
						time.Sleep(50 * time.Millisecond)
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("transitions:\n got %v\nwant %v", got, want)
				}
				if reached != 80 || failed != 12 || rejectedOpen != 80 || rejectedQuota != 0 {
					t.Errorf("reached %d (failed %d), rejected open %d, quota %d; want 80 (12), 80, 0",
						reached, failed, rejectedOpen, rejectedQuota)
				}
				c := b.Counts()
				wantCounts := breaker.Counts{Requests: 160, Successes: 68, Failures: 12, RejectedOpen: 80, Opens: 4}
				if engine == breaker.EngineNative {
					wantCounts.Probes, wantCounts.ProbeFailures = 8, 2
				}
				if c != wantCounts {
					t.Errorf("Counts() = %+v, want %+v", c, wantCounts)
				}
			})
		})
	}
}
