package breaker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
)

// TestAdaptedCleanAfterConcurrentCalls: what a breaker made by
// FromGobreaker records of its gobreaker after calls from many goroutines
// (successes and failures mixed, some tripping it) is what the gobreaker
// is once they are over: clean only when closed with no failure counted.
func TestAdaptedCleanAfterConcurrentCalls(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failEvery int // a goroutine's every n-th call fails (0: none)
		trip      uint32
	}{
		{"successes-only", 0, 5},
		{"failures-counted", 7, 1_000_000},
		{"tripping", 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{
				Timeout:     time.Hour,
				ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= tc.trip },
			})
			b, err := FromGobreaker(cb)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 200 {
						_ = b.Do(context.Background(), func(context.Context) error {
							if tc.failEvery > 0 && (i+g)%tc.failEvery == 0 {
								return errDownstream
							}
							return nil
						})
					}
				})
			}
			wg.Wait()
			want := cb.State() == gobreaker.StateClosed && cb.Counts().TotalFailures == 0
			if got := b.clean(); got != want {
				t.Errorf("clean() = %t, want %t (gobreaker %v, %+v)", got, want, cb.State(), cb.Counts())
			}
		})
	}
}
