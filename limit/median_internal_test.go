package limit

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPushMedian: the engine's running median of its last ShortWindow
// samples is the sorted window's upper middle one, sample after sample,
// ties and repeats included.
func TestPushMedian(t *testing.T) {
	for _, window := range []int{1, 2, 3, 10} {
		e := &gradient2Engine{recent: make([]float64, 0, window), sorted: make([]float64, 0, window)}
		rng := rand.New(rand.NewPCG(1, uint64(window)))
		var last []float64
		for n := range 2000 {
			r := float64(rng.IntN(20)) // repeats on purpose
			last = append(last, r)
			if len(last) > window {
				last = last[1:]
			}
			want := slices.Sorted(slices.Values(last))[len(last)/2]
			if got := e.push(r); got != want {
				t.Fatalf("window %d, sample %d: median %v, want %v (window %v)", window, n, got, want, last)
			}
		}
	}
}
