package timeout

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/internal/latency"
)

// AdaptiveOptions configure [Adaptive]. Zero fields take the defaults noted.
type AdaptiveOptions struct {
	Quantile   float64       // the latency quantile followed (default 0.999)
	Multiplier float64       // timeout = quantile × Multiplier (default 1.5)
	Min, Max   time.Duration // bounds of the timeout (default: New's timeout / 10, and × 10)
	Window     time.Duration // the sliding window of answers (default 60 s)
	MinSamples int           // answers needed before adapting (default 100)
}

// Adaptive makes the timeout follow the observed latency: the Quantile of
// the calls that answered successfully over the last Window, times
// Multiplier, within [Min, Max]. Only answers count, in the histogram and
// toward MinSamples: a call that this timeout cut tells only that it took
// at least the timeout, and counted at the timeout it would let hangs push
// the timeout up to Max, past the callers' deadlines, where a breaker no
// longer sees them as failures. One that is too short still grows, as the
// answers pile up just under it: each recompute raises it by up to
// Multiplier (and one histogram bucket).
//
// A downstream that gets slower than the timeout all at once has no
// answers just under it: every attempt is cut. While the timeout cuts more
// attempts than its Quantile allows, one attempt at a time runs at Max
// (the scout; the caller's deadline still bounds it): if it answers, the
// attempts being cut were slow answers, and the timeout rises at once to
// the scout's latency × Multiplier, staying at least there for a Window;
// if it does not, they were hangs, and the timeout stays where it is. In a
// chain, the breakers outside forgive the failures such slow answers
// counted (docs/timeout.md, "A slowdown is not a hang"). Until MinSamples
// answers are seen, New's timeout applies. Recording a call is O(1) (a histogram with 12.5 % wide
// buckets, one atomic add); memory is fixed (about 24 KiB); the value is
// recomputed every 64 answers and when the window moves.
func Adaptive(o AdaptiveOptions) Option {
	return optionFunc(func(c *config) { c.ad = &o })
}

const recomputeLog = 6 // recompute every 1<<6 records

type tracker struct {
	q, mult    float64
	min, max   time.Duration
	minSamples uint64
	value      atomic.Int64
	records    atomic.Uint64
	computing  atomic.Bool
	w          *latency.Window
	window     time.Duration
	doubt      atomic.Pointer[doubt] // see scout.go
}

func newTracker(d time.Duration, o AdaptiveOptions) (*tracker, error) {
	if o.Quantile == 0 {
		o.Quantile = 0.999
	}
	if o.Multiplier == 0 {
		o.Multiplier = 1.5
	}
	if o.Min == 0 {
		o.Min = max(d/10, 1)
	}
	if o.Max == 0 {
		o.Max = math.MaxInt64
		if d <= math.MaxInt64/10 {
			o.Max = d * 10
		}
	}
	if o.Window == 0 {
		o.Window = time.Minute
	}
	if o.MinSamples == 0 {
		o.MinSamples = 100
	}
	switch {
	case !(o.Quantile > 0 && o.Quantile <= 1):
		return nil, fmt.Errorf("timeout: AdaptiveOptions.Quantile = %v: must be within (0, 1]", o.Quantile)
	case !(o.Multiplier >= 1) || math.IsInf(o.Multiplier, 1):
		return nil, fmt.Errorf("timeout: AdaptiveOptions.Multiplier = %v: must be finite and >= 1", o.Multiplier)
	case o.Min < 0:
		return nil, fmt.Errorf("timeout: AdaptiveOptions.Min = %v: must be >= 0", o.Min)
	case o.Max < o.Min:
		return nil, fmt.Errorf("timeout: AdaptiveOptions.Max = %v: must be >= Min (%v)", o.Max, o.Min)
	case o.Window < latency.Slices:
		return nil, fmt.Errorf("timeout: AdaptiveOptions.Window = %v: must be >= 6ns", o.Window)
	case o.MinSamples < 0:
		return nil, fmt.Errorf("timeout: AdaptiveOptions.MinSamples = %d: must be >= 0", o.MinSamples)
	}
	t := &tracker{
		q: o.Quantile, mult: o.Multiplier, min: o.Min, max: o.Max,
		minSamples: uint64(o.MinSamples), w: latency.New(o.Window), window: o.Window,
	}
	t.value.Store(int64(min(max(d, o.Min), o.Max)))
	return t, nil
}

func (t *tracker) current() time.Duration { return time.Duration(t.value.Load()) }

func (t *tracker) epoch(now time.Time) int64 { return t.w.Epoch(now) }

func (t *tracker) record(d time.Duration) {
	e, moved := t.w.Record(d)
	if moved {
		t.recompute(e)
	}
	// Every 64 records; and at once for an answer that came close to the
	// timeout (past 2/3 of it), which a shifting distribution (a slower
	// downstream, more load) makes common and a steady one rare: the
	// timeout follows a brownout within a few answers instead of cutting
	// the calls that would have succeeded meanwhile.
	if t.records.Add(1)&(1<<recomputeLog-1) == 0 || 3*d > 2*t.current() {
		t.recompute(e)
	}
}

// recompute sets the timeout from the window's histogram; one goroutine at
// a time, others skip.
func (t *tracker) recompute(e int64) {
	if !t.computing.CompareAndSwap(false, true) {
		return
	}
	defer t.computing.Store(false)
	u, ok := t.w.Quantile(e, t.q, t.minSamples)
	if !ok {
		return
	}
	// Compare in float64: a product past MaxInt64 would not convert (nor
	// would float64(t.max) near it, which rounds up to 2^63).
	v := t.max
	if f := float64(u) * t.mult; f < float64(t.max) {
		v = max(time.Duration(f), t.min, t.floorNow(time.Now()))
	}
	t.value.Store(int64(v))
}
