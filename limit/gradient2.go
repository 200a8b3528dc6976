package limit

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Defaults of [Gradient2Settings].
const (
	// DefaultSmoothing and DefaultQueueSize are Netflix's Gradient2Limit's.
	DefaultSmoothing = 0.2
	DefaultQueueSize = 4
	// DefaultTolerance is the rttTolerance Netflix's Gradient2Limit had
	// until it dropped the knob (fixing it at 1): a client measures the
	// network too, and round trips within 1.5 times their long-term
	// average are jitter, not a queue.
	DefaultTolerance = 1.5
	// DefaultLongWindow is Netflix's: the long-term average weighs each
	// sample by 2/(600+1), after a warm-up that averages the first 10.
	DefaultLongWindow = 600
	// DefaultDeadlineShare: the limit falls once the short-term round
	// trip takes half of what its callers have left.
	DefaultDeadlineShare = 0.5
)

// warmupSamples is the number of first samples the long-term average is
// the plain mean of (Netflix's ExpAvgMeasurement warm-up).
const warmupSamples = 10

// Gradient2Settings configures the [Gradient2] algorithm. The zero value
// gives the defaults.
type Gradient2Settings struct {
	// Smoothing is how much of each new estimate the limit takes, in
	// (0, 1] (0: DefaultSmoothing).
	Smoothing float64
	// QueueSize is how far the estimate may exceed limit·gradient: the
	// growth allowed while round trips stay low (0: DefaultQueueSize).
	QueueSize int
	// Tolerance is how many times the long-term round trip the short-term
	// one may be before the limit falls, >= 1 (0: DefaultTolerance).
	Tolerance float64
	// LongWindow is the number of samples the long-term average spans,
	// >= 1 (0: DefaultLongWindow).
	LongWindow int
	// ShortWindow is the number of samples the short-term average spans,
	// >= 1 (0: DefaultShortWindow). 1 takes each sample as it is, which
	// a spread of latencies (a p99 ten times the p50) makes a coin toss
	// between the gradient's floor and 1 on every call.
	ShortWindow int
	// DeadlineShare is the share of a call's time left at its admission
	// (its caller's deadline) that the short-term round trip may take
	// before the limit falls at its fastest (the gradient's floor),
	// whatever the long-term round trip: in (0, 1] (0:
	// DefaultDeadlineShare; < 0: never). Calls whose caller has no
	// deadline are not judged so.
	//
	// The caller's deadline is that of the context the chain was called
	// with (of ctx, for [Limiter.Acquire] or [Limiter.Do] called
	// directly): never one a policy of the chain made for its attempts,
	// such as the attempt timeout a hedge outside the limit puts on each
	// attempt's context, nor a timeout of the chain outside the limit.
	DeadlineShare float64
}

// DefaultShortWindow is the short-term average's span: 10 samples, the
// sample window of Netflix's WindowedLimit, with which Gradient2Limit is
// used.
const DefaultShortWindow = 10

// Gradient2 returns the latency-gradient algorithm of Netflix's
// concurrency-limits (Gradient2Limit, over the averaged samples of its
// WindowedLimit). On each successful call, with rtt its time from
// admission to Done:
//
//	shortRtt = shortRtt·(1−2/(ShortWindow+1)) + rtt·2/(ShortWindow+1) (the first: rtt)
//	longRtt  = longRtt·(1−2/(LongWindow+1)) + shortRtt·2/(LongWindow+1) (the first 10: their mean)
//	if longRtt/shortRtt > 2 { longRtt *= 0.9 }          // recovering from an overload
//	if inflight < limit/2 { stop }                      // the callers, not the limit, bound the load
//	median   = the median of the last ShortWindow samples (the upper middle one)
//	gradient = max(0.5, min(1, Tolerance·longRtt/median))
//	if shortRtt > DeadlineShare·budget { gradient = 0.5 } // a queue that takes the callers' time
//	estimate = limit·(1−Smoothing) + (limit·gradient + QueueSize)·Smoothing
//	(the fall's judgement, below, may hold the estimate or restore it)
//	limit    = max(MinLimit, min(MaxLimit, estimate))
//
// where inflight counts the calls in flight at the call's admission,
// budget is the time its caller had left then (its caller's deadline, see
// DeadlineShare; a call without one skips that line), and the estimate is kept as a real
// number, the limit being its integer part. The deadline's line is not
// Netflix's: the long-term average follows a queue that builds slowly, so
// that Tolerance alone lets a limit grow until the round trips take all of
// the callers' time, where a cluster of slow answers times out attempts in
// a row and opens a breaker on a downstream still serving
// (docs/overload.md).
//
// The median is not Netflix's either: a share of answers far later than
// the rest (a slow path, a cold cache) moved the average of the last ten
// samples by a late one's whole weight, and the gradient with it, where a
// queue raises every sample, and their median. And while the last sample
// left the gradient at 1 (no round trip rising) and the short-term round
// trip is under a quarter of DeadlineShare of
// its caller's time left (an eighth, by default), the limit is a count,
// not a wall: calls past it are admitted, up to MaxLimit (a client's
// stall, a burst of late answers, piles calls in flight while no answer
// says anything of the downstream); once a sample says otherwise, the
// limit refuses past its count again.
//
// The fall's judgement is not Netflix's either. A round trip that moves
// with the capacity intact (a longer route, a slower dependency: every
// call 100 ms later however many are in flight) looks to the gradient
// like a queue until the long-term average has followed, hundreds of
// samples later: the limit fell to its floor and refused most calls a
// healthy downstream would have answered. So a fall on the gradient
// (not on the deadline's line) holds once the estimate is 0.6 of where it
// began, for 20 samples: round trips that stayed within 90 % of what they
// were there did not come from a queue (a queue's round trips fall with the
// concurrency), and the long-term average takes the short-term one and
// the estimate goes back where the fall began.
//
// With a steady round trip the limit grows by QueueSize·Smoothing (0.8 by
// default) per sample taken at a limit at least half used. A drop is left
// out, as in Netflix's Gradient2Limit: a timeout says the call took at
// least that long, not how long, and a downstream whose answers hang
// (rather than slow down under load) is a breaker's business — taken as a
// signal, 20 % of hung answers held the limit at 13 calls in flight where
// 42 were needed (bench: the hang20 cell). Samples are taken under a
// short lock.
func Gradient2(s Gradient2Settings) Algorithm { return gradient2{s} }

type gradient2 struct{ s Gradient2Settings }

func (g gradient2) String() string {
	return fmt.Sprintf("Gradient2(smoothing %g, queue %d, tolerance %g, long window %d, deadline share %g)",
		g.s.Smoothing, g.s.QueueSize, g.s.Tolerance, g.s.LongWindow, g.s.DeadlineShare)
}

func (g gradient2) normalize() (Algorithm, error) {
	s := &g.s
	if s.Smoothing == 0 {
		s.Smoothing = DefaultSmoothing
	}
	if s.QueueSize == 0 {
		s.QueueSize = DefaultQueueSize
	}
	if s.Tolerance == 0 {
		s.Tolerance = DefaultTolerance
	}
	if s.LongWindow == 0 {
		s.LongWindow = DefaultLongWindow
	}
	if s.ShortWindow == 0 {
		s.ShortWindow = DefaultShortWindow
	}
	if s.DeadlineShare == 0 {
		s.DeadlineShare = DefaultDeadlineShare
	}
	switch {
	case math.IsNaN(s.Smoothing) || s.Smoothing <= 0 || s.Smoothing > 1:
		return g, invalid("Gradient2Settings.Smoothing", s.Smoothing, "must be within (0, 1]")
	case s.QueueSize < 0:
		return g, invalid("Gradient2Settings.QueueSize", s.QueueSize, "must be >= 0")
	case math.IsNaN(s.Tolerance) || s.Tolerance < 1 || math.IsInf(s.Tolerance, 1):
		return g, invalid("Gradient2Settings.Tolerance", s.Tolerance, "must be >= 1 and finite")
	case s.LongWindow < 1:
		return g, invalid("Gradient2Settings.LongWindow", s.LongWindow, "must be >= 1")
	case s.ShortWindow < 1:
		return g, invalid("Gradient2Settings.ShortWindow", s.ShortWindow, "must be >= 1")
	case math.IsNaN(s.DeadlineShare) || s.DeadlineShare > 1:
		return g, invalid("Gradient2Settings.DeadlineShare", s.DeadlineShare, "must be within (0, 1], or < 0 for never")
	}
	return g, nil
}

func (g gradient2) engine(c *core, s Settings) engine {
	c.over.Store(int64(s.MaxLimit))
	return &gradient2Engine{
		c: c, s: g.s,
		min: float64(s.MinLimit), max: float64(s.MaxLimit),
		estimate: float64(s.InitialLimit),
		factor:   2 / (float64(g.s.LongWindow) + 1),
		sfactor:  2 / (float64(g.s.ShortWindow) + 1),
		recent:   make([]float64, 0, g.s.ShortWindow),
		sorted:   make([]float64, 0, g.s.ShortWindow),
	}
}

type gradient2Engine struct {
	c        *core
	s        Gradient2Settings
	min, max float64
	factor   float64 // the long-term average's weight of a sample
	sfactor  float64 // the short-term average's

	mu       sync.Mutex
	estimate float64 // the limit, before its integer part is taken
	longRtt  float64 // in nanoseconds
	shortRtt float64 // in nanoseconds; 0 before the first sample
	// recent is the last ShortWindow samples, oldest first from next,
	// and sorted the same samples in order: the gradient reads their
	// median. A share of answers far later than the rest (a slow path, a
	// cold cache) moves their mean by a late one's whole weight, and the
	// gradient with it, where a queue raises them all, and the median.
	recent, sorted []float64
	next           int
	warm           int  // samples in longRtt, up to warmupSamples
	fall           fall // the limit falling on the long-term round trip
}

// fall follows a fall of the limit that the long-term round trip decided:
// from the estimate it fell from, to fallShare of it, then fallSamples
// samples at that concurrency. A queue that the fall drains answers
// sooner; round trips that stay as they were say that the round trip
// itself moved (a longer route, a slower dependency, the same capacity),
// and the fall was not a queue's: the long-term round trip takes the new
// one, and the limit goes back to where it fell from.
type fall struct {
	on    bool
	from  float64 // the estimate it fell from
	probe float64 // the short-term round trip at fallShare of from (0: not there yet)
	n     int     // samples since
}

const (
	fallShare   = 0.6
	fallSamples = 2 * DefaultShortWindow
	fallSame    = 0.9 // round trips within this share of the probe's are as they were
)

func (*gradient2Engine) timed() bool { return true }

// push adds the sample r to the recent ones, the oldest leaving once there
// are ShortWindow, and returns their median (the upper of the two middle
// ones); the caller holds e.mu. The window is small: one pass finds the
// oldest in sorted and slides the others to r's place.
func (e *gradient2Engine) push(r float64) float64 {
	s := e.sorted
	if len(e.recent) < cap(e.recent) {
		e.recent = append(e.recent, r)
		s = append(s, r)
		i := len(s) - 1
		for ; i > 0 && s[i-1] > r; i-- {
			s[i] = s[i-1]
		}
		s[i] = r
		e.sorted = s
		return s[len(s)/2]
	}
	old := e.recent[e.next]
	e.recent[e.next] = r
	if e.next++; e.next == len(e.recent) {
		e.next = 0
	}
	i := 0
	for s[i] != old {
		i++
	}
	if r > old {
		for ; i+1 < len(s) && s[i+1] < r; i++ {
			s[i] = s[i+1]
		}
	} else {
		for ; i > 0 && s[i-1] > r; i-- {
			s[i] = s[i-1]
		}
	}
	s[i] = r
	return s[len(s)/2]
}

// What judgeFall says of a sample.
const (
	fallGoes  = iota // the limit moves as Gradient2 says
	fallHold         // it holds, while the fall's probe runs
	fallMoved        // the round trip moved: it goes back
)

// judgeFall follows a fall (see fall) and says what the limit does; the
// caller holds e.mu.
func (e *gradient2Engine) judgeFall(gradient float64, late bool, short float64) int {
	f := &e.fall
	switch {
	case gradient >= 1 || late:
		// Back within tolerance (a queue drained, or the average caught
		// up), or a round trip the callers cannot wait for: no fall to
		// judge.
		*f = fall{}
		return fallGoes
	case !f.on:
		*f = fall{on: true, from: e.estimate}
		return fallGoes
	case f.probe == 0:
		if e.estimate <= fallShare*f.from {
			f.probe = short
			return fallHold
		}
		return fallGoes
	}
	f.n++
	switch {
	case f.n < fallSamples:
		return fallHold
	case short >= fallSame*f.probe:
		return fallMoved
	}
	*f = fall{} // the round trips fell with the concurrency: a queue
	return fallGoes
}

func (e *gradient2Engine) sample(rtt, budget time.Duration, inflight int, drop bool) {
	if drop {
		return
	}
	e.mu.Lock()
	if e.shortRtt == 0 {
		e.shortRtt = max(float64(rtt), 1)
	} else {
		e.shortRtt = e.shortRtt*(1-e.sfactor) + max(float64(rtt), 1)*e.sfactor
	}
	short := e.shortRtt
	median := e.push(max(float64(rtt), 1))
	if e.warm < warmupSamples {
		e.longRtt = (e.longRtt*float64(e.warm) + short) / float64(e.warm+1)
		e.warm++
	} else {
		e.longRtt = e.longRtt*(1-e.factor) + short*e.factor
	}
	if e.longRtt/short > 2 {
		e.longRtt *= 0.9
	}
	gradient := max(0.5, min(1, e.s.Tolerance*e.longRtt/median))
	late := budget > 0 && e.s.DeadlineShare > 0 && short > e.s.DeadlineShare*float64(budget)
	if late {
		gradient = 0.5
	}
	// Past the limit while no round trip rises and the round trips take
	// under a quarter of what the deadline's line allows (see Gradient2):
	// every sample says so, those of a limit the callers do not use too
	// (which judge no fall: the judgement is not asked here).
	if gradient >= 1 && !(budget > 0 && e.s.DeadlineShare > 0 && 4*short > e.s.DeadlineShare*float64(budget)) {
		e.c.over.Store(int64(e.max))
	} else {
		e.c.over.Store(0)
	}
	if float64(inflight) < e.estimate/2 {
		e.mu.Unlock()
		return
	}
	next := e.estimate*gradient + float64(e.s.QueueSize)
	next = e.estimate*(1-e.s.Smoothing) + next*e.s.Smoothing
	switch e.judgeFall(gradient, late, short) {
	case fallHold:
		next = e.estimate
	case fallMoved:
		e.longRtt, next, e.fall = short, max(e.fall.from, e.estimate), fall{}
	}
	e.estimate = max(e.min, min(e.max, next))
	limit := int64(e.estimate)
	old := e.c.limit.Swap(limit) // under mu: limits are stored in the order they were computed
	e.mu.Unlock()
	if limit > old {
		e.c.admitMore()
	}
}
