package breaker

import (
	"math"
	"sync/atomic"
	"time"
)

// timeWindow counts calls, failures and slow calls over a sliding time
// window kept as a ring of windowBuckets buckets. Calls are counted without a
// lock: one CAS on a word that packs the bucket's epoch and count. The words
// start as one per bucket (80 bytes); the first time a CAS fails because
// another call counted at the same instant, each bucket spreads over
// counterShards cache lines (5 KiB) so that concurrent calls seldom meet,
// as stripedCounter does. Failures and slow calls are counted under the
// breaker's lock, since recording them may trip the breaker anyway.
type timeWindow struct {
	start  time.Time
	width  time.Duration
	calls  [windowBuckets]atomic.Uint64 // epoch<<32 | calls
	spread atomic.Pointer[[windowBuckets][counterShards]paddedUint64]
	bad    *[windowBuckets]badBucket // guarded by machine.mu; made at the first failure or slow call
}

type badBucket struct {
	epoch, fails, slow uint32
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
	slot := &w.calls[e%windowBuckets]
	if sp := w.spread.Load(); sp != nil {
		slot = &sp[e%windowBuckets][shard()].n
	}
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
		if slot == &w.calls[e%windowBuckets] { // contention on a bucket's one word: spread
			w.spread.CompareAndSwap(nil, new([windowBuckets][counterShards]paddedUint64))
			slot = &w.spread.Load()[e%windowBuckets][shard()].n
		}
	}
}

// addBad records a failure or slow call; the caller holds machine.mu.
func (w *timeWindow) addBad(now time.Time, fail, slow bool) {
	e := w.epoch(now)
	if w.bad == nil {
		w.bad = new([windowBuckets]badBucket)
	}
	b := &w.bad[e%windowBuckets]
	if b.epoch != e {
		*b = badBucket{epoch: e}
	}
	if fail && b.fails < math.MaxUint32 {
		b.fails++
	}
	if slow && b.slow < math.MaxUint32 {
		b.slow++
	}
}

// sums returns the calls, failures and slow calls in the window at now; the
// caller holds machine.mu.
func (w *timeWindow) sums(now time.Time) (calls, fails, slow uint64) {
	e := w.epoch(now)
	count := func(v uint64) {
		if e-uint32(v>>32) < windowBuckets {
			calls += v & (1<<32 - 1)
		}
	}
	sp := w.spread.Load()
	for i := range w.calls {
		count(w.calls[i].Load())
		if sp != nil {
			for j := range sp[i] {
				count(sp[i][j].n.Load())
			}
		}
		if w.bad == nil {
			continue
		}
		b := &w.bad[i]
		if b.epoch != 0 && e-b.epoch < windowBuckets {
			fails += uint64(b.fails)
			slow += uint64(b.slow)
		}
	}
	return calls, fails, slow
}

// countWindow holds the outcomes of the last n calls, lock-free: two bits
// a call, sixteen calls a word (a window of 100 calls takes 28 bytes).
type countWindow struct {
	pos         atomic.Uint64
	fails, slow atomic.Int64
	n           uint64
	words       []atomic.Uint32
}

const (
	slotEmpty uint32 = iota
	slotOK
	slotFail
	slotSlow
)

const slotsPerWord = 16

func newCountWindow(n int) *countWindow {
	return &countWindow{n: uint64(n), words: make([]atomic.Uint32, (n+slotsPerWord-1)/slotsPerWord)}
}

func (w *countWindow) add(code uint32) {
	i := (w.pos.Add(1) - 1) % w.n
	word := &w.words[i/slotsPerWord]
	shift := i % slotsPerWord * 2
	var old uint32
	for {
		v := word.Load()
		old = v >> shift & 3
		if old == code {
			return // the usual case, a success replacing a success: no write
		}
		if word.CompareAndSwap(v, v&^(3<<shift)|code<<shift) {
			break
		}
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
	calls = min(w.pos.Load(), w.n)
	return calls, uint64(max(w.fails.Load(), 0)), uint64(max(w.slow.Load(), 0))
}
