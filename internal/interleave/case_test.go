package interleave

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/chain"
)

// mode is how a case runs its chain.
type mode int

const (
	modeDo   mode = iota // chain.Do
	modeHTTP             // httpmw over an http.Client
	modeGRPC             // grpcmw interceptors over a grpc.ClientConn
)

func (m mode) String() string { return [...]string{"Do", "http", "grpc"}[m] }

// akind is how the downstream answers one attempt.
type akind int

const (
	aOK    akind = iota // success, with a body, a header and a trailer naming the attempt
	a5xx                // HTTP 503 / gRPC Unavailable
	a429                // HTTP 429 with Retry-After / gRPC ResourceExhausted with pushback
	aBad                // HTTP 400 / gRPC InvalidArgument: the caller's fault
	aHang               // until the attempt's context ends
	aPanic              // Do: the call itself panics
)

func (k akind) String() string { return [...]string{"ok", "5xx", "429", "bad", "hang", "panic"}[k] }

// answer is the downstream's behaviour for one attempt.
type answer struct {
	kind  akind
	delay time.Duration
	deaf  bool // the delay runs to its end whatever the context says
}

func (a answer) String() string {
	s := fmt.Sprintf("%v@%v", a.kind, a.delay)
	if a.deaf {
		s += "(deaf)"
	}
	return s
}

// callPlan is how the caller makes one call.
type callPlan struct {
	at       time.Duration // from the case's start (concurrent cases)
	deadline time.Duration // the caller's own deadline (0: none but the watchdog)
	cancelAt time.Duration // the caller cancels (0: never)
}

// arrival is one attempt as the downstream saw it.
type arrival struct {
	call, n     int
	ans         answer
	start, end  time.Duration // since the case's start
	deadline    time.Duration // the context's deadline, since the case's start (-1: none)
	answered    bool          // the downstream answered (not ended by its context)
	live        bool          // its context had not ended when it answered
	endedByCtx  bool          // a hang (or a wait) the context ended
	endedAtDead bool          // the context ended at its deadline
}

// result is what one caller got.
type result struct {
	call       int
	start, end time.Duration
	done       bool
	err        error
	panicked   any
	status     int    // HTTP status
	body       string // HTTP body / gRPC reply payload
	header     string // X-Attempt header / metadata
	trailer    string // X-Attempt trailer / metadata
	peer       bool   // gRPC: the peer was filled
}

// kase is one case: a chain, a way to run it, the downstream's script and
// what happened. A case's every draw comes from rng, seeded from its seed.
type kase struct {
	seed    uint64
	replyMu sync.Mutex // the fallbacks' writes to a shared gRPC reply
	rng     *rand.Rand

	mode       mode
	real       bool // real loopback sockets, outside a bubble
	pols       []*pol
	chain      *chain.Chain
	canonical  bool
	template   bool // the chain is one of templates
	fromSpec   bool // the chain was built from a spec file
	strict     bool
	idempotent bool
	idemKey    bool // HTTP: a POST made idempotent by an Idempotency-Key
	metrics    bool
	concurrent bool
	calls      []callPlan
	script     [][]answer
	watchdog   time.Duration
	margin     time.Duration // real sockets: how long before a deadline an answer must come to count as live
	eps        *epCase       // gRPC: dialed through the endpoint policy (nil: one connection, passthrough)

	origin time.Time

	mu       sync.Mutex
	arrivals []*arrival
	perCall  []int
	panics   []time.Duration // when a drawn panic was raised, since origin
	results  []*result

	bodies, closed atomic.Int64 // HTTP response bodies the base made and closed
}

// panicValue is what the drawn panics panic with.
type panicValue struct{ where string }

func (cs *kase) now() time.Duration { return time.Since(cs.origin) }

// panicked records and raises a drawn panic.
func (cs *kase) panicked(where string) {
	cs.mu.Lock()
	cs.panics = append(cs.panics, cs.now())
	cs.mu.Unlock()
	panic(panicValue{where})
}

// delays returns the delays worth drawing for this chain: around its
// timeouts and hedge delays, and a few fixed ones.
func (cs *kase) delays() []time.Duration {
	ds := []time.Duration{0, tick, 3 * tick, 15 * tick}
	cs.walk(func(p *pol) {
		switch p.kind {
		case kTimeout, kHedge:
			ds = append(ds, p.d-tick, p.d, p.d+tick)
			if p.kind == kHedge {
				ds = append(ds, 2*p.d, p.d+5*tick)
			}
		}
	})
	slices.Sort(ds)
	return slices.Compact(ds)
}

// drawBehaviour draws the calls and the downstream's answers.
func (cs *kase) drawBehaviour() {
	r := cs.rng
	n := 1 + r.IntN(4)
	cs.concurrent = n > 1 && r.IntN(2) == 0
	cs.drawCalls(r, n)
}

// drawCalls draws n more calls, and their answers, from r.
func (cs *kase) drawCalls(r *rand.Rand, n int) {
	ds := cs.delays()
	for range n {
		var cp callPlan
		if cs.concurrent {
			cp.at = pick(r, ds...)
		}
		if r.IntN(4) == 0 {
			cp.deadline = max(pick(r, ds...), tick)
		}
		if r.IntN(5) == 0 {
			cp.cancelAt = max(pick(r, ds...), tick)
		}
		cs.calls = append(cs.calls, cp)
		var script []answer
		for range 8 {
			a := answer{delay: pick(r, ds...)}
			switch x := r.IntN(100); {
			case x < 45:
				a.kind = aOK
			case x < 65:
				a.kind = a5xx
			case x < 72:
				a.kind = a429
			case x < 78:
				a.kind = aBad
			case x < 97 || cs.mode != modeDo:
				a.kind = aHang
			default:
				a.kind = aPanic
			}
			a.deaf = a.kind != aHang && r.IntN(5) == 0
			script = append(script, a)
		}
		cs.script = append(cs.script, script)
	}
	cs.perCall = make([]int, len(cs.calls))
	cs.results = make([]*result, len(cs.calls))
}

// arrive records an attempt of call i reaching the downstream, and returns
// its answer.
func (cs *kase) arrive(ctx context.Context, i int) (*arrival, answer) {
	return cs.arriveAt(ctx, i, false)
}

// arriveAt is arrive at an endpoint that may be sick: one that answers
// Unavailable, after the drawn delay, whatever the script says.
func (cs *kase) arriveAt(ctx context.Context, i int, sick bool) (*arrival, answer) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	a := &arrival{call: i, start: cs.now(), deadline: -1}
	if i < 0 || i >= len(cs.perCall) {
		a.call = -1
		cs.arrivals = append(cs.arrivals, a)
		return a, answer{kind: aBad}
	}
	a.n = cs.perCall[i]
	cs.perCall[i]++
	if dl, ok := ctx.Deadline(); ok {
		a.deadline = dl.Sub(cs.origin)
	}
	a.ans = answer{kind: aOK}
	if a.n < len(cs.script[i]) {
		a.ans = cs.script[i][a.n]
	}
	if sick {
		a.ans = answer{kind: a5xx, delay: a.ans.delay}
	}
	cs.arrivals = append(cs.arrivals, a)
	return a, a.ans
}

// serve waits as the answer says; false if the context ended it first.
func (cs *kase) serve(ctx context.Context, a *arrival) bool {
	ans := a.ans
	switch {
	case ans.kind == aHang:
		<-ctx.Done()
	case ans.deaf:
		time.Sleep(ans.delay)
	default:
		t := time.NewTimer(ans.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	a.end = cs.now()
	if ans.kind == aHang || (!ans.deaf && ctx.Err() != nil) {
		a.endedByCtx = true
		a.endedAtDead = a.deadline >= 0 && a.end >= a.deadline
		return false
	}
	// at the instant of a deadline, whether the context has seen it yet is a
	// toss: an answer is live only strictly before
	a.answered, a.live = true, ctx.Err() == nil && (a.deadline < 0 || a.end < a.deadline-cs.margin)
	return true
}

// tag names attempt n of call i in bodies, headers and trailers.
func tag(i, n int) string { return fmt.Sprintf("c%da%d", i, n) }

// fallbackBody is the body of a fallback's degraded answer.
const fallbackBody = "fallback"

func (cs *kase) String() string {
	var calls []string
	for i, cp := range cs.calls {
		var sc []string
		for _, a := range cs.script[i][:4] {
			sc = append(sc, a.String())
		}
		calls = append(calls, fmt.Sprintf("call%d{at %v dl %v cancel %v: %s}", i, cp.at, cp.deadline, cp.cancelAt, strings.Join(sc, ",")))
	}
	where := cs.mode.String()
	if cs.real {
		where += "/loopback"
	}
	if cs.template {
		where += "/template"
	}
	eps := ""
	if cs.eps != nil {
		eps = " " + cs.eps.String()
	}
	return fmt.Sprintf("%s idempotent=%t concurrent=%t strict=%t chain[%s]%s %s", where, cs.idempotent, cs.concurrent, cs.strict, cs.chainString(), eps, strings.Join(calls, " "))
}
