package faults

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
)

// How a call ended.
const (
	endOK       = iota
	endFailed   // an error of the downstream, the network or a timeout
	endOpen     // refused by a breaker (callguard's or failsafe-go's)
	endRejected // refused by callguard's limit (callguard.ErrRejected)
)

func classify(err error) int8 {
	switch {
	case err == nil:
		return endOK
	case errors.Is(err, callguard.ErrRejected):
		return endRejected
	case errors.Is(err, breaker.ErrOpen), errors.Is(err, circuitbreaker.ErrOpen):
		return endOpen
	}
	return endFailed
}

// call is one call of a caller: when it started and ended (since the
// cell's start), the phase it started in, how it ended.
type call struct {
	start, end time.Duration
	phase      int8
	how        int8
}

// The load's bounds.
const (
	// maxCallsPerCaller bounds a caller's calls in a cell, whatever the
	// timeline.
	maxCallsPerCaller = 200_000
	// failPace is the shortest cycle of a caller whose call failed: a
	// call that failed sooner is followed by a wait for the rest, so that
	// an arm failing fast does not spin the two cores every arm shares.
	// Calls that succeed follow each other at once (a closed loop).
	failPace = 10 * time.Millisecond
)

// load is the closed-loop load of a cell: callers callers per arm, each
// starting its next call when the last ends, each call with its own
// deadline, until stop closes.
type load struct {
	t0    time.Time
	phase *atomic.Int32 // the phase a call starts in
	stop  chan struct{}
	wg    sync.WaitGroup
	calls [][]call // by arm, merged when the callers end

	warmMu sync.Mutex
	warmOK []time.Duration // the plain arm's successful calls in the warm-up, guarded by warmMu
}

// startLoad starts the callers of every arm; phase is the cell's phase,
// which the arms stamp on their attempts.
func startLoad(arms []*arm, phase *atomic.Int32) *load {
	l := &load{t0: time.Now(), phase: phase, stop: make(chan struct{}), calls: make([][]call, len(arms))}
	var mu sync.Mutex
	for i, a := range arms {
		for range callers {
			l.wg.Go(func() {
				mine := l.caller(a)
				mu.Lock()
				l.calls[i] = append(l.calls[i], mine...)
				mu.Unlock()
			})
		}
	}
	return l
}

func (l *load) caller(a *arm) []call {
	var out []call
	pause := time.NewTimer(0)
	defer pause.Stop()
	for range maxCallsPerCaller {
		select {
		case <-l.stop:
			return out
		default:
		}
		phase := l.phase.Load()
		start := time.Since(l.t0)
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		err := a.call(ctx)
		cancel()
		end := time.Since(l.t0)
		c := call{start: start, end: end, phase: int8(phase), how: classify(err)}
		out = append(out, c)
		if phase == phaseWarm && err == nil && a.name == armPlain {
			l.warmMu.Lock()
			l.warmOK = append(l.warmOK, end-start)
			l.warmMu.Unlock()
		}
		if err != nil && end-start < failPace {
			pause.Reset(failPace - (end - start))
			select {
			case <-pause.C:
			case <-l.stop:
				return out
			}
		}
	}
	return out
}

// healthy is the median of the plain arm's successful calls so far in
// the warm-up (0 if none).
func (l *load) healthy() time.Duration {
	l.warmMu.Lock()
	d := slices.Clone(l.warmOK)
	l.warmMu.Unlock()
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// since is the time since the load started.
func (l *load) since() time.Duration { return time.Since(l.t0) }

// end stops the callers (a call in flight ends by its deadline) and
// returns every arm's calls.
func (l *load) end() [][]call {
	close(l.stop)
	l.wg.Wait()
	return l.calls
}

// quantile is the q-quantile of sorted d (0 if empty).
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q*float64(len(d))+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}
