package hedge

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/internal/latency"
)

// Policy hedges calls: when an attempt has not answered after the delay,
// it starts another beside it; the first success wins and the others are
// canceled. It is safe for concurrent use; make one with [New] (a zero
// Policy runs calls unhedged).
type Policy struct {
	s     Settings
	delay atomic.Int64
	win   *latency.Window // nil for a fixed delay

	records   atomic.Uint64
	computing atomic.Bool

	tokens  atomic.Int64 // the budget, in thousandths of a hedge
	perCall int64
	burst   int64

	calls, hedges, wins atomic.Uint64

	pool sync.Pool // *run whose timer never fired
	x    bridge.Hedge
}

// New returns a hedging policy, or an error naming the first field of s
// that is out of range.
func New(s Settings) (*Policy, error) {
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Policy{s: s, perCall: int64(s.Budget * 1000), burst: int64(s.Burst) * 1000}
	p.perCall = max(p.perCall, 1)
	p.tokens.Store(p.burst)
	p.delay.Store(int64(s.Delay))
	if s.Quantile > 0 {
		p.win = latency.New(s.Window)
	}
	p.x = bridge.Hedge{Start: p.start, MaxHedges: s.MaxHedges, Delay: p.Delay, Quantile: s.Quantile, Budget: s.Budget}
	return p, nil
}

// Delay returns the delay after which an attempt is hedged now.
func (p *Policy) Delay() time.Duration { return time.Duration(p.delay.Load()) }

// Stats are a hedging policy's counts since it was made.
type Stats struct {
	Calls  uint64 // calls run
	Hedges uint64 // attempts started beside a call's first
	Wins   uint64 // calls a hedge answered first
}

// Stats returns the policy's counts.
func (p *Policy) Stats() Stats {
	return Stats{Calls: p.calls.Load(), Hedges: p.hedges.Load(), Wins: p.wins.Load()}
}

var errNilCall = errors.New("hedge: Do with a nil call")

// Do runs call, and, while it has not answered after the delay, up to
// MaxHedges more copies of it beside it, each with a context of its own;
// it returns nil once one succeeds (canceling the others), or the error of
// the attempt that ended last when all fail. Do returns only after every
// attempt it started has returned: a call must end when its context is
// canceled. Hedge only idempotent calls.
func (p *Policy) Do(ctx context.Context, call func(context.Context) error) error {
	if call == nil {
		return errNilCall
	}
	if p == nil || p.x.Start == nil {
		return call(ctx)
	}
	actx, h := p.start(ctx, runner(call))
	if h == nil {
		return call(actx)
	}
	finished := false
	defer func() {
		if !finished {
			h.Abort() // the first attempt panicked: no hedge outlives the call
		}
	}()
	err := call(actx)
	finished = true
	return h.Finish(err)
}

// runner runs a plain function as an attempt (a func value in an
// interface costs no allocation).
type runner func(context.Context) error

func (r runner) HedgeAttempt(ctx context.Context) error { return r(ctx) }

func (runner) HedgeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}

// deposit credits the budget with a call.
func (p *Policy) deposit() {
	for {
		t := p.tokens.Load()
		if t >= p.burst || p.tokens.CompareAndSwap(t, min(t+p.perCall, p.burst)) {
			return // a take or a refund between the load and the store is kept
		}
	}
}

// wait is how long a call runs before it is hedged: the delay while the
// budget is at least half full, growing to twice the delay as it empties.
// A call past the delay is a straggler more likely the longer it runs:
// with the budget running low, the hedges left go to the calls most
// likely to need them, rather than to the first ordinary slow calls past
// the delay, which would leave none for the stragglers.
func (p *Policy) wait() time.Duration {
	d := p.Delay()
	if t := p.tokens.Load(); 2*t < p.burst {
		extra := time.Duration(float64(d) * (1 - 2*float64(t)/float64(p.burst)))
		if d > math.MaxInt64-extra {
			return math.MaxInt64
		}
		d += extra
	}
	return d
}

// refund gives back a hedge's token: it was refused before it was sent (a
// hedge that was sent and lost the race keeps it spent).
func (p *Policy) refund() {
	p.hedges.Add(^uint64(0))
	for {
		t := p.tokens.Load()
		if p.tokens.CompareAndSwap(t, min(t+1000, p.burst)) {
			return
		}
	}
}

// take spends a hedge from the budget.
func (p *Policy) take() bool {
	for {
		t := p.tokens.Load()
		if t < 1000 {
			return false
		}
		if p.tokens.CompareAndSwap(t, t-1000) {
			return true
		}
	}
}

// observe records the latency of a call's first attempt (see run.ended).
func (p *Policy) observe(d time.Duration) {
	if p.win == nil {
		return
	}
	e, moved := p.win.Record(d)
	if moved || p.records.Add(1)&63 == 0 {
		p.recompute(e)
	}
}

func (p *Policy) recompute(e int64) {
	if !p.computing.CompareAndSwap(false, true) {
		return
	}
	defer p.computing.Store(false)
	if q, ok := p.win.Interpolated(e, p.s.Quantile, uint64(p.s.MinSamples)); ok {
		p.delay.Store(int64(min(max(q, p.s.MinDelay), p.s.MaxDelay)))
	}
}

func init() {
	bridge.HedgeOf = func(p any) *bridge.Hedge {
		h := p.(*Policy)
		if h == nil || h.x.Start == nil {
			return &bridge.Hedge{}
		}
		return &h.x
	}
}

// String describes the policy, e.g. "hedge(after p95, from 20ms; ≤ 1
// hedge; budget 5 %)".
func (p *Policy) String() string {
	when := fmt.Sprintf("after %v", p.s.Delay)
	if p.s.Quantile > 0 {
		when = fmt.Sprintf("after p%s, from %v", pct(p.s.Quantile), p.s.Delay)
	}
	return fmt.Sprintf("hedge(%s; ≤ %d hedge; budget %s %%)", when, p.s.MaxHedges, pct(p.s.Budget))
}

func pct(f float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", 100*f), "0"), ".")
}
