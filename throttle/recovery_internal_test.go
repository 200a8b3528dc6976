package throttle

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

// recovery drives a throttle at 100 calls a second: the downstream refuses
// every call for outage, then accepts every call. It returns p at the end
// of the outage and how long after the heal p first fell below 0.05, and
// under 0.5.
func recovery(t *testing.T, s Settings, outage time.Duration) (peak float64, half, healed time.Duration) {
	t.Helper()
	const every = 10 * time.Millisecond
	th, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	th.random = rand.New(rand.NewPCG(1, 2)).Float64 // deterministic decisions
	errDown := errors.New("unavailable")
	for range outage / every {
		if p, err := th.Allow(context.Background()); err == nil {
			p.Done(errDown)
		}
		time.Sleep(every)
	}
	peak = th.RejectionRate()
	start := time.Now()
	for elapsed := time.Duration(0); elapsed < 10*th.s.Window; elapsed = time.Since(start) {
		p := th.RejectionRate()
		if half == 0 && p < 0.5 {
			half = elapsed
		}
		if p < 0.05 {
			return peak, half, elapsed
		}
		if pm, err := th.Allow(context.Background()); err == nil {
			pm.Done(nil)
		}
		time.Sleep(every)
	}
	t.Fatalf("p still %v %v after the heal", th.RejectionRate(), 10*th.s.Window)
	return
}

// After a 2-minute outage at 100 calls/s, p sits at its cap; once the
// downstream heals, the 10 % of calls still admitted bring accepts back
// and p falls below 0.05 within about one window.
func TestRecovery(t *testing.T) {
	for _, tc := range []struct {
		s            Settings
		half, healed time.Duration // pinned for the seed, in virtual time
	}{
		{Settings{}, 0, 0},
		{Settings{Window: 2 * time.Minute}, 0, 0},
		{Settings{Window: 10 * time.Second}, 0, 0},
		{Settings{MaxRejectionRate: 0.99}, 0, 0},
	} {
		synctest.Test(t, func(t *testing.T) {
			peak, half, healed := recovery(t, tc.s, 2*time.Minute)
			t.Logf("%+v: peak p %.3f, p < 0.5 after %v, p < 0.05 after %v", tc.s, peak, half, healed)
		})
	}
}
