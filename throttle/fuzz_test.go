package throttle_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/throttle"
)

// FuzzSettings: New never panics on any Settings. It returns a
// *throttle.SettingsError naming a field of Settings, or a throttle that
// runs a script of refusals, accepts, neutral ends and waits without
// panicking, whose p stays within [0, MaxRejectionRate] and whose accepts
// never exceed its requests.
func FuzzSettings(f *testing.F) {
	f.Add(0.0, int64(0), 0.0, 0, []byte{0, 1, 2, 3})
	f.Add(2.0, int64(time.Minute), 0.9, 20, []byte{0, 0, 0, 1, 3, 2})
	f.Add(1.0, int64(10), 1.0, 1, []byte{0, 3, 0, 3, 1})
	f.Add(0.5, int64(-1), 1.5, -1, []byte{})
	f.Add(math.NaN(), int64(9), math.NaN(), 0, []byte{0})
	f.Add(1e300, int64(1<<62), 1e-300, 1<<62, []byte{0, 3})
	fields := map[string]bool{}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[throttle.Settings]()) {
		fields[f.Name] = true
	}
	errDown := errors.New("down")
	f.Fuzz(func(t *testing.T, k float64, window int64, maxRate float64, minRequests int, script []byte) {
		s := throttle.Settings{K: k, Window: time.Duration(window), MaxRejectionRate: maxRate, MinRequests: minRequests}
		th, err := throttle.New(s)
		if err != nil {
			var se *throttle.SettingsError
			if !errors.As(err, &se) || !fields[se.Field] || th != nil {
				t.Fatalf("New(%+v) = %v, %v (%T); want a *SettingsError naming a field", s, th, err, err)
			}
			return
		}
		_ = th.String()
		n := th.Settings()
		if len(script) > 64 {
			script = script[:64]
		}
		synctest.Test(t, func(t *testing.T) {
			for _, op := range script {
				switch op % 4 {
				case 0:
					_ = th.Do(context.Background(), func(context.Context) error { return errDown })
				case 1:
					_ = th.Do(context.Background(), func(context.Context) error { return nil })
				case 2:
					if p, err := th.Allow(context.Background()); err == nil {
						p.DoneNeutral()
					}
				case 3:
					time.Sleep(min(n.Window/7, time.Hour)) // huge sleeps overflow the bubble's clock
				}
				p := th.RejectionRate()
				r, a := th.Counts()
				if !(p >= 0 && p <= n.MaxRejectionRate) || a > r || a < 0 {
					t.Fatalf("%+v: p = %v, %d requests, %d accepts", n, p, r, a)
				}
			}
		})
	})
}
