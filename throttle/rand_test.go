package throttle_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/throttle"
)

// rejections returns which of 300 requests a throttle with settings s
// rejected, the downstream refusing every one it got.
func rejections(t *testing.T, s throttle.Settings) []bool {
	var out []bool
	synctest.Test(t, func(t *testing.T) {
		th, err := throttle.New(s)
		if err != nil {
			t.Fatal(err)
		}
		for range 300 {
			err := th.Do(context.Background(), func(context.Context) error { return errors.New("refused") })
			out = append(out, errors.Is(err, throttle.ErrThrottled))
			time.Sleep(10 * time.Millisecond)
		}
	})
	return out
}

// TestRandReplays: a throttle drawing from a seeded source rejects the
// same requests in two runs, others with another seed.
func TestRandReplays(t *testing.T) {
	a := rejections(t, throttle.Settings{Rand: rand.NewPCG(3, 0)})
	b := rejections(t, throttle.Settings{Rand: rand.NewPCG(3, 0)})
	c := rejections(t, throttle.Settings{Rand: rand.NewPCG(4, 0)})
	n := 0
	for _, r := range a {
		if r {
			n++
		}
	}
	if n < 100 || !slices.Equal(a, b) {
		t.Errorf("the same seed: %d of 300 rejected, the same requests %t; want most rejected, the same", n, slices.Equal(a, b))
	}
	if slices.Equal(a, c) {
		t.Error("another seed rejected the same requests")
	}
}
