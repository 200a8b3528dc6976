package hedge

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/internal/hold"
)

// run is one hedged call. A run whose timer never fired goes back to the
// policy's pool, timer and all: a call that needs no hedge allocates
// nothing for it beyond its first attempt's context.
type run struct {
	p     *Policy
	timer *time.Timer // calls fire; made once per run
	ctx   context.Context
	r     bridge.HedgeRunner

	mu       sync.Mutex
	fired    bool // the timer fired: the run is not reused
	closed   bool // Finish began: no more hedges
	won      bool
	launched int   // hedges started
	running  int   // hedges whose result is not yet received
	last     error // the error of the attempt that ended last, a hedge refused before it was sent aside
	attempts []attempt
	results  chan result
}

type attempt struct {
	start  time.Time
	cancel context.CancelFunc
	held   *hold.Attempt // under hold.WithHolder: the winner's context lives while held
	ended  bool
}

type result struct {
	n   int
	err error
}

func (x *run) lock()   { x.mu.Lock() }
func (x *run) unlock() { x.mu.Unlock() }

// start begins a hedged call (see bridge.Hedge.Start).
func (p *Policy) start(ctx context.Context, r bridge.HedgeRunner) (context.Context, bridge.HedgeCall) {
	p.calls.Add(1)
	p.deposit()
	if ctx.Value(bridge.NoHedge{}) != nil {
		return ctx, nil
	}
	x, _ := p.pool.Get().(*run)
	if x == nil {
		x = &run{p: p, attempts: make([]attempt, p.s.MaxHedges+1), results: make(chan result, p.s.MaxHedges)}
		x.timer = time.AfterFunc(time.Hour, x.fire)
		x.timer.Stop()
	}
	x.ctx, x.r = ctx, r
	actx := x.newAttempt(0)
	x.timer.Reset(p.wait())
	return actx, x
}

// newAttempt makes the context of attempt n.
func (x *run) newAttempt(n int) context.Context {
	actx, cancel := x.r.HedgeContext(x.ctx)
	a := &x.attempts[n]
	*a = attempt{start: time.Now(), cancel: cancel}
	if hold.Holdable(x.ctx) {
		a.held = hold.NewAttempt(x.ctx, actx, cancel)
		return a.held
	}
	return actx
}

// fire starts a hedge, if the call still needs one and the budget allows.
func (x *run) fire() {
	x.lock()
	x.fired = true
	if x.closed || x.won || x.launched >= x.p.s.MaxHedges || x.ctx.Err() != nil || !x.p.take() {
		x.unlock()
		return
	}
	x.launched++
	n := x.launched
	actx := x.newAttempt(n)
	x.running++
	if x.launched < x.p.s.MaxHedges {
		x.timer.Reset(x.p.wait())
	}
	x.unlock()
	x.p.hedges.Add(1)
	go x.hedge(actx, n)
}

// hedge runs attempt n and reports its result, however it ends: a panic
// is carried to the caller's goroutine, which Finish panics on; a
// runtime.Goexit (a test's FailNow in the call) reports errGoexit.
func (x *run) hedge(ctx context.Context, n int) {
	err := errGoexit
	defer func() {
		v := recover()
		if v != nil {
			err = &panicked{v}
		}
		x.lock()
		x.ended(n, err)
		if v != nil {
			// The call will panic: the other attempts are canceled, the
			// first on the caller's goroutine included, so that the panic
			// reaches the caller as soon as they have returned.
			x.closed = true
			x.cancelOthers(n)
		}
		x.unlock()
		x.results <- result{n, err}
	}()
	err = x.r.HedgeAttempt(ctx)
}

// ended records that attempt n returned err; x locked. The first success
// wins: the attempts still running are canceled. An attempt that ended
// has its context ended through its hold, if it has one (a response the
// caller may still read keeps it alive). A hedge refused before it was
// sent (a local rejection: callguard.ErrRejected) gives its budget token
// back and does not become the call's error while another attempt has an
// answer.
func (x *run) ended(n int, err error) {
	a := &x.attempts[n]
	a.ended = true
	if err == nil && !x.won {
		// The delay follows the first attempts' latencies, one per call:
		// its own when it wins; when a hedge wins, the time it had run, a
		// lower bound of its latency, which is what a quantile above the
		// delay needs (how many take longer). Leaving those out would
		// make the delay fall with every hedge that wins.
		x.won = true
		x.p.observe(time.Since(x.attempts[0].start))
		if n > 0 {
			x.p.wins.Add(1)
		}
		x.cancelOthers(n)
	}
	refused := n > 0 && err != nil && notSent(err)
	if refused {
		x.p.refund()
	}
	if err != nil && (!refused || x.last == nil) {
		x.last = err
	}
	if a.held != nil {
		a.held.Finish() // canceled once nothing holds it
	} else {
		a.cancel()
	}
}

// notSent reports an attempt's error that says it was never sent: a local
// refusal (callguard.ErrRejected), or a context that ended while it waited
// for admission (bridge.NotSent). Only the layer that sends knows: an
// adapter refuses with an ErrRejected error before sending, and ends an
// attempt that was sent and lost the race with one that is not.
func notSent(err error) bool {
	var ns *bridge.NotSent
	return errors.Is(err, callguard.ErrRejected) || errors.As(err, &ns)
}

// cancelOthers cancels the attempts still running but n; x locked.
func (x *run) cancelOthers(n int) {
	for i := range x.attempts[:x.launched+1] {
		if o := &x.attempts[i]; i != n && !o.ended {
			o.cancel()
		}
	}
}

// Finish ends the call (see bridge.HedgeCall).
func (x *run) Finish(err error) error {
	stopped := x.timer.Stop()
	x.lock()
	x.closed = true
	x.ended(0, err)
	running, reuse := x.running, stopped && !x.fired
	x.unlock()
	var pv *panicked
	for ; running > 0; running-- {
		r := <-x.results
		if p, ok := r.err.(*panicked); ok && pv == nil {
			pv = p
		}
	}
	x.lock()
	err = x.last
	if x.won {
		err = nil
	}
	x.unlock()
	if reuse {
		x.ctx, x.r, x.last = nil, nil, nil
		x.launched, x.running, x.won, x.closed = 0, 0, false, false
		clear(x.attempts)
		x.p.pool.Put(x)
	}
	if pv != nil {
		panic(pv.v) // after every attempt has returned
	}
	return err
}

// panicked is a hedge's panic, carried to the caller's goroutine.
type panicked struct{ v any }

func (p *panicked) Error() string { return "hedge: a hedged attempt panicked" }

// errGoexit is the result of a hedge whose call ended its goroutine
// (runtime.Goexit).
var errGoexit = errors.New("hedge: a hedged attempt ended its goroutine (runtime.Goexit)")

// Abort ends the call after the first attempt panicked on the caller's
// goroutine: the other attempts are canceled and waited for, so that none
// outlives the call; the caller's panic then goes on.
func (x *run) Abort() {
	defer func() { _ = recover() }() // a hedge's panic too: the caller's goes on
	x.lock()
	x.closed = true // no hedge starts from here
	x.cancelOthers(0)
	x.unlock()
	_ = x.Finish(errAborted)
}

var errAborted = errors.New("hedge: the first attempt panicked")
