//go:debug randseednop=0

package retry_test

import (
	"context"
	"errors"
	mathrand "math/rand"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/retry"
)

// TestNoGlobalDraw: a retry whose waits are exact (Jitter(0), Constant) or
// jittered from its own source (Rand) draws nothing from math/rand's
// global source, so that a program (or a benchmark) that seeds that source
// replays whatever retries run beside it. backoff/v4's ExponentialBackOff
// draws from it on every NextBackOff, even with RandomizationFactor 0;
// the unseeded jitter still does, by design (the control row).
func TestNoGlobalDraw(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []retry.Option
		draws bool
	}{
		{"Rand", []retry.Option{retry.Exponential(10*time.Millisecond, time.Second), retry.Jitter(0.2), retry.Rand(rand.NewPCG(1, 2))}, false},
		{"Jitter(0)", []retry.Option{retry.Exponential(10*time.Millisecond, time.Second), retry.Jitter(0)}, false},
		{"Constant", []retry.Option{retry.Constant(10 * time.Millisecond), retry.Jitter(0)}, false},
		{"Jitter(0.2), unseeded (control)", []retry.Option{retry.Exponential(10*time.Millisecond, time.Second), retry.Jitter(0.2)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, err := retry.New(append(tc.opts, retry.MaxAttempts(4))...)
				if err != nil {
					t.Fatal(err)
				}
				//lint:ignore SA1019 seeding the global source is what is tested
				mathrand.Seed(7)
				want := mathrand.Float64()
				//lint:ignore SA1019 as above
				mathrand.Seed(7)
				calls := 0
				err = p.Do(context.Background(), func(context.Context) error { calls++; return errors.New("down") })
				if calls != 4 || err == nil {
					t.Fatalf("%d calls, %v; want 4 calls and an error", calls, err)
				}
				if drew := mathrand.Float64() != want; drew != tc.draws {
					t.Errorf("drew from math/rand's global source: %v, want %v", drew, tc.draws)
				}
			})
		})
	}
}
