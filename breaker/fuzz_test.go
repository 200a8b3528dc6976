package breaker_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
)

// FuzzSettings: New never panics on any Settings. It returns a
// *breaker.SettingsError naming a field of Settings, or a breaker that
// runs a script of failures, successes and waits without panicking, whose
// counters add up, and whose String and Settings answer.
func FuzzSettings(f *testing.F) {
	f.Add(0, 0.0, int64(0), 0, 0, int64(0), 0.0, int64(0), int64(0), 0, 0, false, uint8(0), []byte{0, 1, 2})
	f.Add(5, 0.5, int64(10*time.Second), 0, 20, int64(time.Second), 0.5, int64(time.Second), int64(30*time.Second), 3, 2, false, uint8(0), []byte{0, 0, 0, 0, 0, 3, 1, 1})
	f.Add(1, 0.0, int64(0), 100, 10, int64(0), 0.0, int64(time.Second), int64(0), 1, 1, true, uint8(0), []byte{0, 3, 1})
	f.Add(3, 0.2, int64(time.Minute), 0, 5, int64(0), 0.0, int64(time.Second), int64(0), 2, 2, false, uint8(1), []byte{0, 0, 0, 3, 1, 1})
	f.Add(-1, 1.5, int64(-1), -1, -1, int64(-1), 2.0, int64(-1), int64(-1), -1, -1, false, uint8(9), []byte{})
	f.Add(1<<62, 1e-300, int64(1<<62), 1<<40, 1<<62, int64(1<<62), 1e-300, int64(1<<62), int64(1<<63-1), 1<<62, 1<<62, false, uint8(1), []byte{0, 3})
	fields := map[string]bool{}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[breaker.Settings]()) {
		fields[f.Name] = true
	}
	errDown := errors.New("down")
	f.Fuzz(func(t *testing.T, consecutive int, rate float64, window int64, windowCalls, minCalls int, slow int64, slowRate float64,
		open, maxOpen int64, probes, successes int, skip bool, engine uint8, script []byte) {
		s := breaker.Settings{
			ConsecutiveFailures: consecutive, FailureRate: rate, Window: time.Duration(window), WindowCalls: windowCalls % (1 << 20),
			MinCalls: minCalls, SlowCall: time.Duration(slow), SlowCallRate: slowRate,
			OpenTimeout: time.Duration(open), MaxOpenTimeout: time.Duration(maxOpen), HalfOpenProbes: probes, HalfOpenSuccesses: successes,
			SkipHalfOpen: skip, Engine: breaker.Engine(engine),
		}
		if windowCalls < 0 {
			s.WindowCalls = windowCalls // negative: must be refused
		}
		b, err := breaker.New(s)
		if err != nil {
			var se *breaker.SettingsError
			if !errors.As(err, &se) || !fields[se.Field] || b != nil {
				t.Fatalf("New(%+v) = %v, %v (%T); want a *SettingsError naming a field", s, b, err, err)
			}
			return
		}
		_ = b.String()
		_ = b.Settings()
		if len(script) > 64 {
			script = script[:64]
		}
		synctest.Test(t, func(t *testing.T) {
			for _, op := range script {
				switch op % 4 {
				case 0:
					_ = b.Do(context.Background(), func(context.Context) error { return errDown })
				case 1:
					_ = b.Do(context.Background(), func(context.Context) error { return nil })
				case 2:
					_ = b.Do(context.Background(), func(context.Context) error { time.Sleep(2 * time.Second); return nil })
				case 3:
					time.Sleep(time.Duration(op) * time.Second)
				}
				_ = b.State()
			}
		})
		c := b.Counts()
		if c.Successes+c.Failures+c.Neutral+c.SlowUnanswered > c.Requests {
			t.Fatalf("%v: counts %+v: more outcomes than requests", b, c)
		}
	})
}
