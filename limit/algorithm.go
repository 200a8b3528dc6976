package limit

import (
	"fmt"
	"math"
	"time"
)

// Algorithm adjusts a [Limiter]'s limit from the outcomes of its calls.
// Make one with [AIMD] or [Gradient2]; no other implementation is
// possible. An Algorithm is an immutable value, safe to share between
// limiters: each limiter keeps its own state.
type Algorithm interface {
	// String describes the algorithm and its settings as given, e.g.
	// "AIMD(backoff 0.9)"; those of [Limiter.Settings] have the defaults
	// filled in.
	String() string

	normalize() (Algorithm, error)
	engine(c *core, s Settings) engine
}

// engine is one limiter's instance of an algorithm.
type engine interface {
	// sample feeds one call that ended: its time from admission to Done,
	// its caller's time left at its admission (0: no deadline), the calls
	// in flight at its admission (itself included), and whether it was a
	// drop.
	sample(rtt, budget time.Duration, inflight int, drop bool)
	// timed reports whether sample reads rtt: if not, the limiter does
	// not read the clock (two reads a call).
	timed() bool
}

// Defaults of [AIMDSettings].
const (
	// DefaultBackoffRatio is Netflix's AIMDLimit's: the limit shrinks by
	// 10 % on every drop. Drops come one call at a time, and an overload
	// times out many calls at once: 0.9 per drop takes a limit of 20 to
	// 12 after the 5 drops of one bad round trip, where halving (TCP's
	// rule, applied once per round trip, not per lost packet) would take
	// it to its minimum.
	DefaultBackoffRatio = 0.9
)

// AIMDSettings configures the [AIMD] algorithm. The zero value gives the
// defaults.
type AIMDSettings struct {
	// BackoffRatio multiplies the limit on each drop, in [0.5, 1)
	// (0: DefaultBackoffRatio).
	BackoffRatio float64
}

// AIMD returns the additive-increase, multiplicative-decrease algorithm of
// Netflix's concurrency-limits (AIMDLimit). A call that succeeds while at
// least half the limit was in flight at its admission raises the limit by
// 1; a drop sets it to max(MinLimit, min(limit−1, ⌊limit·BackoffRatio⌋)).
// Other outcomes leave it as it is; the limit stays within [MinLimit,
// MaxLimit]. It reacts only to drops: to timeouts, not to latency.
func AIMD(s AIMDSettings) Algorithm { return aimd{s} }

type aimd struct{ s AIMDSettings }

func (a aimd) String() string { return fmt.Sprintf("AIMD(backoff %g)", a.s.BackoffRatio) }

func (a aimd) normalize() (Algorithm, error) {
	if a.s.BackoffRatio == 0 {
		a.s.BackoffRatio = DefaultBackoffRatio
	}
	if math.IsNaN(a.s.BackoffRatio) || a.s.BackoffRatio < 0.5 || a.s.BackoffRatio >= 1 {
		return a, invalid("AIMDSettings.BackoffRatio", a.s.BackoffRatio, "must be within [0.5, 1)")
	}
	return a, nil
}

func (a aimd) engine(c *core, s Settings) engine {
	return &aimdEngine{c: c, ratio: a.s.BackoffRatio, min: int64(s.MinLimit), max: int64(s.MaxLimit)}
}

// aimdEngine's only state is the core's limit, updated by compare-and-swap:
// a sample takes no lock.
type aimdEngine struct {
	c        *core
	ratio    float64
	min, max int64
}

func (*aimdEngine) timed() bool { return false }

func (e *aimdEngine) sample(_, _ time.Duration, inflight int, drop bool) {
	for {
		cur := e.c.limit.Load()
		next := cur
		switch {
		case drop:
			next = max(e.min, min(cur-1, int64(float64(cur)*e.ratio)))
		case int64(inflight)*2 >= cur:
			next = min(cur+1, e.max)
		}
		if next == cur {
			return
		}
		if e.c.limit.CompareAndSwap(cur, next) {
			if next > cur {
				e.c.admitMore()
			}
			return
		}
	}
}
