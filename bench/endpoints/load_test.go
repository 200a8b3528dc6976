package endpoints

import (
	"context"
	"errors"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
)

// The phases of a case: healthy, backend #0 (or every backend) bad,
// healed. A call belongs to the phase it started in.
const (
	phaseWarm = iota
	phaseBad
	phaseHealed
	phases
)

var phaseNames = [phases]string{"warm-up", "bad", "healed"}

// How a call ended.
const (
	endOK       = iota
	endFailed   // an error of a backend, the network or the deadline
	endOpen     // refused by a breaker of the client's (breaker.ErrOpen)
	endRejected // refused by the client's limit (callguard.ErrRejected)
)

func classify(err error) int8 {
	switch {
	case err == nil:
		return endOK
	case errors.Is(err, callguard.ErrRejected):
		return endRejected
	case errors.Is(err, breaker.ErrOpen):
		return endOpen
	}
	return endFailed
}

// call is one call of a caller: when it started and ended (on the case's
// clock), the phase it started in, how it ended.
type call struct {
	start, end time.Duration
	phase      int8
	how        int8
}

// The load's bounds.
const (
	// maxCallsPerCaller bounds a caller's calls in a case, whatever the
	// timeline.
	maxCallsPerCaller = 100_000
	// failPace is the shortest cycle of a caller whose call failed: a
	// call that failed sooner is followed by a wait for the rest, so that
	// an arm failing fast does not spin the cores every arm shares. Calls
	// that succeed follow each other at once (a closed loop).
	failPace = 10 * time.Millisecond
)

// load is a case's closed-loop load: callers callers per arm, each
// starting its next call when its last ends, each call with its own
// deadline, until stop closes.
type load struct {
	clock time.Time
	phase atomic.Int32
	stop  chan struct{}
	wg    sync.WaitGroup
	calls [][]call // by arm, merged when the callers end
	// errs counts the errors of the calls started in the bad phase, by
	// arm, by message (addresses and ports blanked).
	errs []map[string]int
}

// startLoad starts the callers of every arm.
func startLoad(arms []*arm, clock time.Time) *load {
	l := &load{clock: clock, stop: make(chan struct{}), calls: make([][]call, len(arms)), errs: make([]map[string]int, len(arms))}
	var mu sync.Mutex
	for i, a := range arms {
		l.errs[i] = map[string]int{}
		for range callers {
			l.wg.Go(func() {
				errs := map[string]int{}
				mine := l.caller(a, errs)
				mu.Lock()
				l.calls[i] = append(l.calls[i], mine...)
				for k, n := range errs {
					l.errs[i][k] += n
				}
				mu.Unlock()
			})
		}
	}
	return l
}

func (l *load) caller(a *arm, errs map[string]int) []call {
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
		start := time.Since(l.clock)
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		err := a.call(ctx)
		cancel()
		end := time.Since(l.clock)
		out = append(out, call{start: start, end: end, phase: int8(phase), how: classify(err)})
		if err != nil && phase == phaseBad {
			errs[blank(err.Error())]++
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

var addrRE = regexp.MustCompile(`127\.0\.0\.\d+(:\d+)?|:\d{4,5}\b|\d+(\.\d+)?(ns|µs|ms|s)\b`)

// blank is an error's message without its addresses, ports and
// durations, cut to
// 160 bytes: the same error from every backend is one.
func blank(msg string) string {
	msg = addrRE.ReplaceAllString(msg, "…")
	if len(msg) > 160 {
		msg = msg[:160] + "…"
	}
	return msg
}

// since is the time on the case's clock.
func (l *load) since() time.Duration { return time.Since(l.clock) }

// end stops the callers (a call in flight ends by its deadline) and
// returns every arm's calls and errors.
func (l *load) end() ([][]call, []map[string]int) {
	close(l.stop)
	l.wg.Wait()
	return l.calls, l.errs
}

// quantile is the q-quantile of sorted d (0 if empty).
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q*float64(len(d))+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}
