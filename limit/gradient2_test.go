package limit_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/limit"
)

// model is Gradient2 as its documentation states it, with the default
// settings, to check the limiter against sample by sample.
type model struct {
	estimate, long, short, tolerance float64
	warm                             int
	share                            float64       // DeadlineShare (0: the line is skipped)
	budget                           time.Duration // the calls' time left at admission (0: no deadline)

	// the last 10 samples, whose median the gradient reads
	recent []float64

	// the fall's judgement: on a fall, its start's estimate; at 0.6 of
	// it, the short-term round trip then and the samples since
	falling     bool
	from, probe float64
	sinceProbe  int
}

func (m *model) sample(rtt time.Duration, inflight int) int {
	if m.short == 0 {
		m.short = float64(rtt)
	} else {
		m.short = m.short*(1-2.0/11) + float64(rtt)*2.0/11
	}
	short := m.short
	m.recent = append(m.recent, float64(rtt))
	if len(m.recent) > 10 {
		m.recent = m.recent[1:]
	}
	if m.warm < 10 {
		m.long = (m.long*float64(m.warm) + short) / float64(m.warm+1)
		m.warm++
	} else {
		f := 2.0 / 601
		m.long = m.long*(1-f) + short*f
	}
	if m.long/short > 2 {
		m.long *= 0.9
	}
	if float64(inflight) < m.estimate/2 {
		return int(m.estimate)
	}
	sorted := slices.Sorted(slices.Values(m.recent))
	g := max(0.5, min(1, m.tolerance*m.long/sorted[len(sorted)/2]))
	late := m.budget > 0 && m.share > 0 && short > m.share*float64(m.budget)
	if late {
		g = 0.5
	}
	next := m.estimate*0.8 + (m.estimate*g+4)*0.2
	// The fall's judgement (Gradient2's doc): a fall on the long-term
	// round trip holds at 0.6 of where it began for 20 samples; round
	// trips still at 90 % of what they were then, the limit goes back
	// there and the long-term round trip takes the short-term one.
	switch {
	case g >= 1 || late:
		m.falling, m.probe, m.sinceProbe = false, 0, 0
	case !m.falling:
		m.falling, m.from = true, m.estimate
	case m.probe == 0:
		if m.estimate <= 0.6*m.from {
			m.probe, next = short, m.estimate
		}
	default:
		m.sinceProbe++
		switch {
		case m.sinceProbe < 20:
			next = m.estimate
		case short >= 0.9*m.probe:
			m.long, next = short, max(m.from, m.estimate)
			m.falling, m.probe, m.sinceProbe = false, 0, 0
		default:
			m.falling, m.probe, m.sinceProbe = false, 0, 0
		}
	}
	m.estimate = max(1, min(200, next))
	return int(m.estimate)
}

// round admits n calls at once (the i-th with i+1 in flight), lets rtt
// pass and ends them all in the order they came, checking the limit
// against the model after each.
func round(t *testing.T, l *limit.Limiter, m *model, n int, rtt time.Duration) {
	t.Helper()
	ps := acquireN(t, l, n)
	time.Sleep(rtt)
	end(t, l, m, ps, rtt)
}

// roundWithin is round with each call's caller giving it the model's
// budget, as a deadline.
func roundWithin(t *testing.T, l *limit.Limiter, m *model, n int, rtt time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), m.budget)
	defer cancel()
	ps := make([]limit.Permit, n)
	for i := range ps {
		p, err := l.Acquire(ctx)
		if err != nil {
			t.Fatalf("call %d of %d: %v (limit %d)", i+1, n, err, l.Limit())
		}
		ps[i] = p
	}
	time.Sleep(rtt)
	end(t, l, m, ps, rtt)
}

// end ends the calls of a round in the order they came, checking the
// limit against the model after each.
func end(t *testing.T, l *limit.Limiter, m *model, ps []limit.Permit, rtt time.Duration) {
	t.Helper()
	n := len(ps)
	for i, p := range ps {
		p.Done(nil)
		if want := m.sample(rtt, i+1); l.Limit() != want {
			t.Fatalf("sample %d of %d (rtt %v): Limit() = %d, the formula gives %d", i+1, n, rtt, l.Limit(), want)
		}
	}
}

// TestGradient2SteadyRTT: with a constant round trip the limit grows by
// QueueSize·Smoothing = 0.8 per sample taken with at least half the limit
// in flight, up to MaxLimit and no further.
func TestGradient2SteadyRTT(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustLimiter(t, limit.Settings{})
		m := &model{estimate: 20, tolerance: 1.5}
		round(t, l, m, 20, 10*time.Millisecond)
		// Samples 1–9 are below half the limit; 10–20 add 0.8 each: 20 + 11·0.8.
		wantLimit(t, l, 28, "after 20 calls at 10 ms")
		rounds := 1
		for l.Limit() < 200 {
			round(t, l, m, l.Limit(), 10*time.Millisecond)
			rounds++
		}
		// 28 → 40 → 56 → 78 → 109 → 153 → 200.
		if rounds != 7 {
			t.Errorf("reached MaxLimit after %d rounds, want 7", rounds)
		}
		round(t, l, m, 200, 10*time.Millisecond)
		wantLimit(t, l, 200, "at MaxLimit")
	})
}

// TestGradient2RTTDoubles: after a warm-up at 10 ms, calls at 20 ms make
// the gradient Tolerance·longRtt/20ms: with the default tolerance, 1.5,
// about 0.78, which the QueueSize of 4 nearly offsets at a limit of 20;
// with a tolerance of 1, about 0.52, and the limit falls. It falls to 0.6
// of where it began and holds there; the round trips staying as they
// were at that concurrency, the round trip moved rather than queued, and
// the limit goes back where it began (TestGradient2QueueFalls: a queue's
// round trips fall with the concurrency, and the limit with them).
func TestGradient2RTTDoubles(t *testing.T) {
	for _, tc := range []struct {
		tolerance float64
		want      [2]int // after the first and second rounds at 20 ms
		rtt       time.Duration
	}{
		{1.5, [2]int{19, 20}, 40 * time.Millisecond}, // then at 40 ms: gradient ≈ 0.55
		{1, [2]int{12, 11}, 20 * time.Millisecond},
	} {
		synctest.Test(t, func(t *testing.T) {
			l := mustLimiter(t, limit.Settings{Algorithm: limit.Gradient2(limit.Gradient2Settings{Tolerance: tc.tolerance})})
			m := &model{estimate: 20, tolerance: tc.tolerance}
			for range 10 {
				round(t, l, m, 1, 10*time.Millisecond) // 1 in flight: the average warms, the limit holds
			}
			wantLimit(t, l, 20, "after the warm-up")
			round(t, l, m, 20, 20*time.Millisecond)
			wantLimit(t, l, tc.want[0], "after 20 calls at 20 ms")
			round(t, l, m, l.Limit(), 20*time.Millisecond)
			wantLimit(t, l, tc.want[1], "after a second round at 20 ms")
			from, lowest, rounds := max(l.Limit(), 20), l.Limit(), 0
			for l.Limit() < from && rounds < 10 {
				round(t, l, m, l.Limit(), tc.rtt)
				lowest = min(lowest, l.Limit())
				rounds++
			}
			if l.Limit() < from || 10*lowest < 5*from {
				t.Errorf("at %v: the limit fell to %d and was %d after %d rounds, want it back to %d, never below half of it", tc.rtt, lowest, l.Limit(), rounds, from)
			}
		})
	}
}

// TestGradient2QueueFalls: a downstream of 5 workers (10 ms a call), 4
// callers for 2 s (no queue: the round trip is the service time), then 20:
// the round trips are a queue's, 20/5 service times at 20 in flight, and
// fall with the concurrency. The limit falls toward the workers, as
// before the fall's judgement (12 against 9: the hold at 0.6 of where it
// fell from lasts 20 samples), the round trips having fallen with the
// concurrency. (Gradient2's long-term average then takes the queue's
// round trip as the norm, and the limit grows back: its Tolerance.)
func TestGradient2QueueFalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustLimiter(t, limit.Settings{})
		const workers, service = 5, 10 * time.Millisecond
		slots := make(chan struct{}, workers)
		start := time.Now()
		var wg sync.WaitGroup
		lowest := atomic.Int64{}
		lowest.Store(1000)
		for i := range 20 {
			wg.Go(func() {
				if i >= 4 {
					time.Sleep(2 * time.Second)
				}
				for time.Since(start) < 10*time.Second {
					err := l.Do(context.Background(), func(context.Context) error {
						slots <- struct{}{}
						time.Sleep(service)
						<-slots
						return nil
					})
					if err != nil {
						time.Sleep(service)
					}
					if time.Since(start) > 2*time.Second {
						for h := lowest.Load(); int64(l.Limit()) < h && !lowest.CompareAndSwap(h, int64(l.Limit())); h = lowest.Load() {
						}
					}
				}
			})
		}
		wg.Wait()
		if lw := lowest.Load(); lw > 3*workers {
			t.Errorf("the limit fell to %d at most once the queue formed, want it near the %d workers (at most %d)", lw, workers, 3*workers)
		}
	})
}

// TestGradient2DeadlineShare: round trips that take more than
// DeadlineShare of what their callers had left make the limit fall at its
// fastest, though the long-term average has followed them and Tolerance
// alone lets it grow; a call without a deadline, a share they stay
// under, or DeadlineShare < 0 leave the limit to Tolerance.
func TestGradient2DeadlineShare(t *testing.T) {
	for _, tc := range []struct {
		name     string
		share    float64 // as given
		model    float64 // as the model applies it
		deadline time.Duration
		want     [2]int // the limit after the first and the third round
	}{
		{"default share, 1s deadlines", 0, 0.5, time.Second, [2]int{11, 9}}, // e → 0.9e + 0.8 per sample with half the limit in flight, toward 8,
		{"share 0.75", 0.75, 0.75, time.Second, [2]int{28, 56}},
		{"never", -1, 0, time.Second, [2]int{28, 56}},
		{"no deadline", 0, 0.5, 0, [2]int{28, 56}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := mustLimiter(t, limit.Settings{Algorithm: limit.Gradient2(limit.Gradient2Settings{DeadlineShare: tc.share})})
				m := &model{estimate: 20, tolerance: 1.5, share: tc.model, budget: tc.deadline}
				r := round
				if tc.deadline > 0 {
					r = roundWithin
				}
				for range 10 {
					r(t, l, m, 1, 600*time.Millisecond) // 1 in flight: the averages warm at 600 ms, the limit holds
				}
				wantLimit(t, l, 20, "after the warm-up")
				r(t, l, m, 20, 600*time.Millisecond)
				wantLimit(t, l, tc.want[0], "after 20 calls at 600 ms")
				r(t, l, m, l.Limit(), 600*time.Millisecond)
				r(t, l, m, l.Limit(), 600*time.Millisecond)
				wantLimit(t, l, tc.want[1], "after three rounds at 600 ms")
			})
		})
	}
}

// TestGradient2Drop: a drop is left out, as in Netflix's Gradient2Limit:
// 41 timeouts leave the limit at 20, and the next successes go on from
// the averages as they were.
func TestGradient2Drop(t *testing.T) {
	l := mustLimiter(t, limit.Settings{})
	for range 41 {
		p, _ := l.Acquire(context.Background())
		p.Done(errTimeout)
	}
	wantLimit(t, l, 20, "after 41 drops")
}

// TestGradient2Recovery: when round trips fall to a quarter of their
// long-term average (the end of an overload), the average is cut by 10 %
// on each sample while longRtt/shortRtt > 2, instead of decaying over 600, and
// the gradient stays at 1: the limit grows at once.
func TestGradient2Recovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustLimiter(t, limit.Settings{})
		m := &model{estimate: 20, tolerance: 1.5}
		for range 10 {
			round(t, l, m, 1, 40*time.Millisecond)
		}
		round(t, l, m, 20, 10*time.Millisecond)
		wantLimit(t, l, 28, "20 calls at a quarter of the average")
		// Cut by 10 % on each sample while the short-term average is below
		// half of it, where the plain average would still be near 39 ms.
		if m.long > float64(25*time.Millisecond) {
			t.Errorf("long-term average %v, want <= 25ms", time.Duration(m.long))
		}
	})
}
