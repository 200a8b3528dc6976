package breaker

import (
	"sync/atomic"
	"time"
)

// timeWindow counts calls, failures and slow calls over a sliding time
// window kept as a ring of windowBuckets buckets. Calls are counted without a
// lock: one CAS on a word that packs the bucket's epoch and count, spread
// over counterShards cache lines so that concurrent calls seldom meet.
// Failures and slow calls are counted under the breaker's lock, since
// recording them may trip the breaker anyway.
type timeWindow struct {
	start time.Time
	width time.Duration
	calls [windowBuckets][counterShards]struct {
		w atomic.Uint64 // epoch<<32 | calls
		_ [56]byte
	}
	bad [windowBuckets]badBucket // guarded by machine.mu
}

type badBucket struct {
	epoch       uint32
	fails, slow uint64
}

func newTimeWindow(start time.Time, window time.Duration) *timeWindow {
	return &timeWindow{start: start, width: window / windowBuckets}
}

// epoch numbers the buckets from 1 since the window started (0 = empty).
func (w *timeWindow) epoch(now time.Time) uint32 {
	d := now.Sub(w.start)
	if d < 0 {
		d = 0
	}
	return uint32(d/w.width) + 1
}

func (w *timeWindow) addCall(now time.Time) {
	e := w.epoch(now)
	slot := &w.calls[e%windowBuckets][shard()].w
	for {
		old := slot.Load()
		oe := uint32(old >> 32)
		var next uint64
		switch {
		case oe == e:
			next = old + 1
		case oe-e-1 < windowBuckets-1:
			// The slot is 1 to 9 buckets ahead: the window has moved on and
			// this call is too old to count. (Any other epoch is stale, also
			// after the 32-bit epoch wraps around in a long idle gap.)
			return
		default:
			next = uint64(e)<<32 | 1
		}
		if slot.CompareAndSwap(old, next) {
			return
		}
	}
}

// addBad records a failure or slow call; the caller holds machine.mu.
func (w *timeWindow) addBad(now time.Time, fail, slow bool) {
	e := w.epoch(now)
	b := &w.bad[e%windowBuckets]
	if b.epoch != e {
		*b = badBucket{epoch: e}
	}
	if fail {
		b.fails++
	}
	if slow {
		b.slow++
	}
}

// sums returns the calls, failures and slow calls in the window at now; the
// caller holds machine.mu.
func (w *timeWindow) sums(now time.Time) (calls, fails, slow uint64) {
	e := w.epoch(now)
	for i := range w.calls {
		for j := range w.calls[i] {
			v := w.calls[i][j].w.Load()
			if e-uint32(v>>32) < windowBuckets {
				calls += v & (1<<32 - 1)
			}
		}
		b := &w.bad[i]
		if b.epoch != 0 && e-b.epoch < windowBuckets {
			fails += b.fails
			slow += b.slow
		}
	}
	return calls, fails, slow
}

// countWindow holds the outcomes of the last n calls, lock-free.
type countWindow struct {
	pos         atomic.Uint64
	fails, slow atomic.Int64
	slots       []atomic.Uint32
}

const (
	slotEmpty uint32 = iota
	slotOK
	slotFail
	slotSlow
)

func newCountWindow(n int) *countWindow {
	return &countWindow{slots: make([]atomic.Uint32, n)}
}

func (w *countWindow) add(code uint32) {
	i := w.pos.Add(1) - 1
	slot := &w.slots[i%uint64(len(w.slots))]
	if slot.Load() == code {
		return // the usual case, a success replacing a success: no write
	}
	old := slot.Swap(code)
	if old == code {
		return
	}
	switch old {
	case slotFail:
		w.fails.Add(-1)
	case slotSlow:
		w.slow.Add(-1)
	}
	switch code {
	case slotFail:
		w.fails.Add(1)
	case slotSlow:
		w.slow.Add(1)
	}
}

func (w *countWindow) sums() (calls, fails, slow uint64) {
	calls = min(w.pos.Load(), uint64(len(w.slots)))
	return calls, uint64(max(w.fails.Load(), 0)), uint64(max(w.slow.Load(), 0))
}
