// Package latency keeps a sliding window of observed latencies as a
// histogram, for the policies that follow a quantile of them: the adaptive
// timeout (package timeout) and the hedging delay (package hedge).
// Recording is O(1) (one atomic add into a bucket 12.5 % wide) with fixed
// memory (about 24 KiB); time comes from time.Now only.
package latency

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

const (
	histSub     = 8 // sub-buckets per power of two
	histBuckets = 64 * histSub
	// Slices is how many slices a window is kept as: the oldest is
	// forgotten as a whole when the window moves on by one slice.
	Slices = 6
)

// Window is a histogram of the latencies recorded over the last window,
// kept as [Slices] slices. It is safe for concurrent use; make one with
// [New].
type Window struct {
	start time.Time
	width time.Duration // of a slice
	slice [Slices]struct {
		epoch  atomic.Int64
		counts [histBuckets]atomic.Uint64
	}
}

// New returns a window of length w (at least [Slices] nanoseconds),
// starting now.
func New(w time.Duration) *Window {
	return &Window{start: time.Now(), width: max(w/Slices, 1)}
}

// Bucket maps a latency to its histogram bucket: the power of two and the
// next three bits.
func Bucket(d time.Duration) int {
	if d < histSub {
		return max(int(d), 0)
	}
	v := uint64(d)
	exp := bits.Len64(v) - 1 // v in [2^exp, 2^(exp+1))
	sub := int(v>>(exp-3)) & (histSub - 1)
	return min((exp-2)*histSub+sub, histBuckets-1)
}

// Upper is the largest latency in bucket i.
func Upper(i int) time.Duration {
	if i < histSub {
		return time.Duration(i)
	}
	exp := i/histSub + 2
	sub := i % histSub
	return time.Duration((uint64(histSub+sub+1) << (exp - 3)) - 1)
}

// Epoch returns the number of the slice now falls in.
func (w *Window) Epoch(now time.Time) int64 {
	return int64(max(now.Sub(w.start), 0)/w.width) + 1
}

// Record adds d, observed now, and returns the epoch it went to and
// whether it started a new slice (the window moved on: a quantile may
// have changed).
func (w *Window) Record(d time.Duration) (epoch int64, moved bool) {
	e := w.Epoch(time.Now())
	s := &w.slice[e%Slices]
	if old := s.epoch.Load(); old != e {
		if old > e {
			return e, false // a reading older than the slice's data: drop it, never go back
		}
		// The slice is reused for a new epoch: whoever wins the swap clears it.
		if s.epoch.CompareAndSwap(old, e) {
			for i := range s.counts {
				s.counts[i].Store(0)
			}
			moved = true
		}
	}
	s.counts[Bucket(d)].Add(1)
	return e, moved
}

// Quantile returns the upper bound of the bucket that holds the
// q-quantile of the latencies recorded over the window ending in epoch e,
// and ok false when fewer than minSamples (or none) are there.
func (w *Window) Quantile(e int64, q float64, minSamples uint64) (d time.Duration, ok bool) {
	return w.quantile(e, q, minSamples, false)
}

// Interpolated is Quantile, but between the bounds of the bucket, by the
// rank's place among the bucket's samples: the estimate a hedging delay
// wants (the bucket's upper bound, up to 12.5 % above, would hedge fewer
// calls than asked for).
func (w *Window) Interpolated(e int64, q float64, minSamples uint64) (d time.Duration, ok bool) {
	return w.quantile(e, q, minSamples, true)
}

func (w *Window) quantile(e int64, q float64, minSamples uint64, interpolate bool) (d time.Duration, ok bool) {
	var hist [histBuckets]uint64
	var total uint64
	for i := range w.slice {
		s := &w.slice[i]
		if se := s.epoch.Load(); se <= 0 || e-se >= Slices {
			continue
		}
		for j := range s.counts {
			n := s.counts[j].Load()
			hist[j] += n
			total += n
		}
	}
	if total < minSamples || total == 0 {
		return 0, false
	}
	// The q-quantile is the smallest sample with at least q of all at or
	// below it: rank ⌈total × q⌉ (the epsilon absorbs float error in, e.g.,
	// 1000 × 0.999).
	rank := max(uint64(math.Ceil(float64(total)*q-1e-9)), 1)
	var seen uint64
	for i, n := range hist {
		if seen+n >= rank {
			if !interpolate || i == 0 {
				return Upper(i), true
			}
			lo, hi := float64(Upper(i-1)), float64(Upper(i))
			return time.Duration(lo + (hi-lo)*float64(rank-seen)/float64(n)), true
		}
		seen += n
	}
	return Upper(histBuckets - 1), true
}
