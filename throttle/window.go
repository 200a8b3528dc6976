package throttle

import (
	"math"
	"sync/atomic"
	"time"
)

// window counts requests and accepts over a sliding time window kept as a
// ring of buckets, without a lock and without a goroutine: each count is
// one word that packs the bucket's epoch (high 32 bits) and its count (low
// 32 bits), moved on by CAS. A bucket rolls lazily: the first count of a
// new epoch replaces the stale word. An accept is counted in the bucket
// of its request, so a request and its accept leave the window together,
// and accepts never outlive their requests.
type window struct {
	start    time.Time
	width    time.Duration // Window / buckets
	_        [64]byte      // requests and accepts on cache lines of their own
	requests [buckets]atomic.Uint64
	_        [64]byte
	accepts  [buckets]atomic.Uint64
	_        [64]byte
}

const countMask = 1<<32 - 1

func (w *window) init(start time.Time, span time.Duration) {
	w.start = start
	w.width = span / buckets
}

// epoch numbers the buckets from 1 since the window started (0: empty).
func (w *window) epoch(now time.Time) uint32 {
	d := now.Sub(w.start)
	if d < 0 {
		d = 0
	}
	return uint32(d/w.width) + 1
}

// add counts one in the bucket of epoch e. It reports false, counting
// nothing, when the bucket has already moved on to a later epoch (a call
// that raced a roll, or an accept whose request has left the window).
func add(slot *atomic.Uint64, e uint32) bool {
	for {
		old := slot.Load()
		oe := uint32(old >> 32)
		var next uint64
		switch {
		case oe == e:
			if old&countMask == countMask {
				return true // saturated: 4 billion in one bucket
			}
			next = old + 1
		case int32(oe-e) > 0:
			return false // the slot holds a later epoch
		default:
			next = uint64(e)<<32 | 1 // stale or empty: roll
		}
		if slot.CompareAndSwap(old, next) {
			return true
		}
	}
}

// sub takes one back from the bucket of epoch e, if it is still there.
func sub(slot *atomic.Uint64, e uint32) {
	for {
		old := slot.Load()
		if uint32(old>>32) != e || old&countMask == 0 {
			return
		}
		if slot.CompareAndSwap(old, old-1) {
			return
		}
	}
}

// sums returns the requests and accepts in the window that ends in epoch e.
func (w *window) sums(e uint32) (requests, accepts int) {
	var r, a uint64
	for i := range buckets {
		if v := w.requests[i].Load(); e-uint32(v>>32) < buckets {
			r += v & countMask
		}
		if v := w.accepts[i].Load(); e-uint32(v>>32) < buckets {
			a += v & countMask
		}
	}
	return clampInt(r), clampInt(a)
}

func clampInt(v uint64) int {
	if v > math.MaxInt {
		return math.MaxInt
	}
	return int(v)
}

// rate is the SRE book's rejection probability, capped.
func rate(requests, accepts int, s *Settings) float64 {
	if requests < s.MinRequests || requests == 0 {
		return 0
	}
	p := (float64(requests) - s.K*float64(accepts)) / (float64(requests) + 1)
	if !(p > 0) {
		return 0
	}
	return min(p, s.MaxRejectionRate)
}
