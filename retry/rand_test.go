package retry_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/retry"
)

// waitsOf returns the waits of 20 calls that fail every attempt, through a
// retry of 4 attempts from 100 ms with jitter 0.5 and opts.
func waitsOf(t *testing.T, opts ...retry.Option) []time.Duration {
	var waits []time.Duration
	synctest.Test(t, func(t *testing.T) {
		opts = append(opts, retry.MaxAttempts(4), retry.Exponential(100*time.Millisecond, time.Second), retry.Jitter(0.5),
			retry.OnRetry(func(_ int, _ error, wait time.Duration) { waits = append(waits, wait) }))
		p, err := retry.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			_ = p.Do(context.Background(), func(context.Context) error { return errors.New("down") })
		}
	})
	return waits
}

// TestRandReplays: a retry whose jitter comes from a seeded source waits
// the same in two runs, differently with another seed, and each wait is
// within the jitter's range of its nominal wait.
func TestRandReplays(t *testing.T) {
	a := waitsOf(t, retry.Rand(rand.NewPCG(7, 0)))
	b := waitsOf(t, retry.Rand(rand.NewPCG(7, 0)))
	c := waitsOf(t, retry.Rand(rand.NewPCG(8, 0)))
	if len(a) != 60 || !slices.Equal(a, b) {
		t.Errorf("the same seed: %d waits, equal %t; want 60, equal", len(a), slices.Equal(a, b))
	}
	if slices.Equal(a, c) {
		t.Error("another seed gave the same waits")
	}
	for i, w := range a {
		nominal := 100 * time.Millisecond << (i % 3)
		if w < nominal/2 || w > nominal*3/2 {
			t.Errorf("wait %d: %v, want within ±50%% of %v", i, w, nominal)
		}
	}
	// The global source draws differently each run: two runs agree only
	// by chance.
	if slices.Equal(waitsOf(t), waitsOf(t)) {
		t.Error("without Rand, two runs gave the same 60 jittered waits")
	}
}

func TestRandNil(t *testing.T) {
	if _, err := retry.New(retry.Rand(nil)); err == nil || !strings.Contains(err.Error(), "Rand(nil)") {
		t.Errorf("Rand(nil): %v, want an error naming it", err)
	}
}
