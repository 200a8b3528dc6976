package limit_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/callguard/callguard/limit"
)

// FuzzSettings: New either refuses the settings with a SettingsError
// naming a field, or returns a limiter whose limit starts at InitialLimit
// and stays within [MinLimit, MaxLimit] whatever its calls do.
func FuzzSettings(f *testing.F) {
	f.Add(false, 0, 0, 0, 0, int64(0), 0.0, 0, 0.0, 0, uint64(0))
	f.Add(true, 20, 5, 22, 4, int64(time.Millisecond), 0.5, 0, 0.0, 0, uint64(0xf0f0))
	f.Add(false, 10, 1, 200, 0, int64(0), 0.3, 2, 1.0, 10, uint64(0x5555))
	f.Add(false, -1, 0, 0, 0, int64(-1), math.NaN(), -1, math.Inf(1), -5, uint64(1))
	f.Fuzz(func(t *testing.T, aimd bool, initial, minL, maxL, maxQueue int, maxWait int64, ratio float64, queueSize int, tolerance float64, window int, outcomes uint64) {
		alg := limit.Gradient2(limit.Gradient2Settings{Smoothing: ratio, QueueSize: queueSize, Tolerance: tolerance, LongWindow: window})
		if aimd {
			alg = limit.AIMD(limit.AIMDSettings{BackoffRatio: ratio})
		}
		s := limit.Settings{Algorithm: alg, InitialLimit: initial, MinLimit: minL, MaxLimit: maxL % 100000, MaxQueue: maxQueue, MaxWait: time.Duration(maxWait)}
		l, err := limit.New(s)
		if err != nil {
			var se *limit.SettingsError
			if !errors.As(err, &se) || se.Field == "" || se.Reason == "" {
				t.Fatalf("New(%+v): %v, want a SettingsError naming a field", s, err)
			}
			return
		}
		n := l.Settings()
		if n.MinLimit < 1 || n.MinLimit > n.InitialLimit || n.InitialLimit > n.MaxLimit || l.Limit() != n.InitialLimit {
			t.Fatalf("New(%+v): limit %d, settings %+v", s, l.Limit(), n)
		}
		ctx := context.Background()
		var held []limit.Permit
		for i := range 64 {
			if outcomes>>i&1 == 1 {
				// Only with a free slot: a queued Acquire would wait
				// for a release this goroutine cannot make.
				if l.InFlight() < l.Limit() {
					p, err := l.Acquire(ctx)
					if err != nil {
						t.Fatalf("Acquire with %d of %d in flight: %v", l.InFlight(), l.Limit(), err)
					}
					held = append(held, p)
				}
			} else if len(held) > 0 {
				p := held[0]
				held = held[1:]
				if i%3 == 0 {
					p.Done(errTimeout)
				} else {
					p.Done(nil)
				}
			}
			if got := l.Limit(); got < n.MinLimit || got > n.MaxLimit {
				t.Fatalf("Limit() = %d, outside [%d, %d]", got, n.MinLimit, n.MaxLimit)
			}
		}
		for _, p := range held {
			p.DoneNeutral()
		}
		if l.InFlight() != 0 {
			t.Fatalf("InFlight() = %d after every permit was released", l.InFlight())
		}
	})
}
