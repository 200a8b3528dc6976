package interleave

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/spec"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
)

// kind is a policy kind the generator draws.
type kind int

const (
	kFallback kind = iota
	kTimeout
	kRetry
	kThrottle
	kHedge
	kLimit
	kBulkhead
	kBreaker
	kOwn // a user's own policy: see own
	nKinds
)

// rank is a kind's place in the canonical order (fallback outermost).
var rank = [nKinds]int{kFallback: 0, kTimeout: 1, kRetry: 2, kThrottle: 3, kHedge: 4, kLimit: 5, kBulkhead: 5, kBreaker: 6, kOwn: 4}

// own says what a user's own policy does.
type own int

const (
	ownWrap  own = iota // runs a nested chain of its own
	ownTwice            // runs two attempts at once, a naive hedger
	ownPanic            // panics after the call returns, on the calls it picks
	ownPass             // passes the call through
)

// pol is one drawn policy, its settings and what it was built into.
type pol struct {
	kind kind
	d    time.Duration // timeout; hedge delay; retry wait
	n    int           // attempts; hedges; consecutive failures
	desc string
	p    chain.Policy
	br   *breaker.Breaker
	lim  *limit.Limiter
	bh   *limit.Bulkhead
	// waits: a queue with no MaxWait, where a call waits for as long as
	// another call's attempt holds the slot.
	waits   bool
	hg      *hedge.Policy
	th      *throttle.Throttle
	aimd    bool
	initial int
	minLim  int
	budget  float64
	burst   int
	open    time.Duration // breaker: the longest open stay
	panics  bool          // a callback of it panics
	own     own
	inner   []*pol // ownWrap: its chain
	panicOn uint64 // ownPanic: a bit per call index
	// spec is the policy as an entry of a spec file ("" for what needs
	// code: a fallback, a user's own policy, a panicking callback).
	spec string
}

// inside reports whether p's kind multiplies attempts.
func (p *pol) multiplies() bool {
	switch p.kind {
	case kRetry, kHedge:
		return true
	case kOwn:
		if p.own == ownTwice {
			return true
		}
		if p.own == ownWrap {
			return slices.ContainsFunc(p.inner, (*pol).multiplies)
		}
	}
	return false
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// tick is the step of every drawn duration: delays are drawn around the
// chain's own timeouts and hedge delays, so that answers come just below,
// at and just above them.
const tick = time.Millisecond

// drawPolicy draws one policy of kind k; fb is the fallback's answer.
func (cs *kase) drawPolicy(k kind, depth int) (*pol, error) {
	r := cs.rng
	p := &pol{kind: k}
	var err error
	switch k {
	case kFallback:
		p.panics = r.IntN(12) == 0
		var opts []fallback.Option
		any := r.IntN(3) > 0
		if any {
			opts = append(opts, fallback.OnAnyFailure())
		}
		p.desc = fmt.Sprintf("fallback(any=%t,panics=%t)", any, p.panics)
		panics := p.panics
		p.p, err = fallback.New(func(ctx context.Context, err error) error {
			if panics {
				cs.panicked("fallback")
			}
			return cs.degrade(ctx)
		}, opts...)
	case kTimeout:
		p.d = time.Duration(pick(r, 5, 10, 20, 30, 50, 100, 300)) * tick
		p.desc = fmt.Sprintf("timeout(%v)", p.d)
		p.spec = fmt.Sprintf("timeout: %v", p.d)
		p.p, err = timeout.New(p.d)
	case kRetry:
		p.n = 2 + r.IntN(3)
		p.d = time.Duration(pick(r, 0, 1, 5, 10, 20)) * tick
		p.panics = r.IntN(15) == 0
		opts := []retry.Option{retry.MaxAttempts(p.n), retry.Jitter(0)}
		waits := fmt.Sprintf("constant: %v", p.d)
		if r.IntN(2) == 0 || p.d == 0 {
			opts = append(opts, retry.Constant(p.d))
		} else {
			opts = append(opts, retry.Exponential(p.d, 8*p.d))
			waits = fmt.Sprintf("exponential: {initial: %v, max: %v}", p.d, 8*p.d)
		}
		whenOpen := r.IntN(6) == 0
		if whenOpen {
			opts = append(opts, retry.RetryWhenOpen())
		}
		// From the draws above, so that a seed's case stays what it was:
		// waits fit to the deadline for even attempts, local refusals
		// retried for 3.
		fit, rejected := p.n%2 == 0, p.n == 3
		if fit {
			opts = append(opts, retry.FitDeadline())
		}
		if rejected {
			opts = append(opts, retry.RetryRejected())
		}
		if !p.panics {
			p.spec = fmt.Sprintf("retry: {attempts: %d, jitter: 0, %s, retryWhenOpen: %t, fitDeadline: %t, retryRejected: %t}", p.n, waits, whenOpen, fit, rejected)
		}
		if p.panics {
			opts = append(opts, retry.OnRetry(func(int, error, time.Duration) { cs.panicked("OnRetry") }))
		}
		p.desc = fmt.Sprintf("retry(%d,wait %v,panics=%t)", p.n, p.d, p.panics)
		p.p, err = retry.New(opts...)
	case kThrottle:
		s := throttle.Settings{Window: time.Hour, MinRequests: pick(r, 1, 3, 20), K: pick(r, 0, 1.5, 2)}
		p.desc = fmt.Sprintf("throttle(min %d,K %v)", s.MinRequests, s.K)
		p.spec = fmt.Sprintf("throttle: {window: 1h, minRequests: %d, k: %v}", s.MinRequests, s.K)
		p.th, err = throttle.New(s)
		p.p = p.th
	case kHedge:
		p.d = time.Duration(pick(r, 5, 10, 20)) * tick
		p.n = 1 + r.IntN(2)
		p.budget = pick(r, 0, 0.1, 0.5, 1)
		p.burst = pick(r, 0, 1, 2, 30)
		s := hedge.Settings{Delay: p.d, MaxHedges: p.n, Budget: p.budget, Burst: p.burst}
		p.desc = fmt.Sprintf("hedge(%v,≤%d,budget %v,burst %d)", p.d, p.n, p.budget, p.burst)
		p.spec = fmt.Sprintf("hedge: {delay: %v, maxHedges: %d, budget: %v, burst: %d}", p.d, p.n, p.budget, p.burst)
		p.hg, err = hedge.New(s)
		p.p = p.hg
		if p.budget == 0 {
			p.budget = 0.05
		}
		if p.burst == 0 {
			p.burst = 30
		}
	case kLimit:
		s := limit.Settings{InitialLimit: pick(r, 1, 2, 4, 20), MinLimit: pick(r, 0, 1, 2)}
		p.aimd = r.IntN(2) == 0
		if p.aimd {
			s.Algorithm = limit.AIMD(limit.AIMDSettings{})
		} else {
			s.Algorithm = limit.Gradient2(limit.Gradient2Settings{})
		}
		if r.IntN(2) == 0 {
			s.MaxQueue = 1 + r.IntN(3)
			s.MaxWait = time.Duration(pick(r, 0, 5, 20)) * tick
		}
		p.initial, p.minLim = s.InitialLimit, max(s.MinLimit, 1)
		p.waits = s.MaxQueue > 0 && s.MaxWait == 0
		p.desc = fmt.Sprintf("limit(%s,%d,min %d,queue %d,wait %v)", map[bool]string{true: "AIMD", false: "Gradient2"}[p.aimd], s.InitialLimit, s.MinLimit, s.MaxQueue, s.MaxWait)
		p.spec = fmt.Sprintf("limit: {algorithm: %s, initialLimit: %d, minLimit: %d, maxQueue: %d, maxWait: %v}", map[bool]string{true: "aimd", false: "gradient2"}[p.aimd], s.InitialLimit, s.MinLimit, s.MaxQueue, s.MaxWait)
		p.lim, err = limit.New(s)
		p.p = p.lim
	case kBulkhead:
		s := limit.BulkheadSettings{MaxConcurrent: pick(r, 1, 2, 5)}
		if r.IntN(2) == 0 {
			s.MaxQueue = 1 + r.IntN(3)
			s.MaxWait = time.Duration(pick(r, 0, 5, 20)) * tick
		}
		p.desc = fmt.Sprintf("bulkhead(%d,queue %d,wait %v)", s.MaxConcurrent, s.MaxQueue, s.MaxWait)
		p.spec = fmt.Sprintf("bulkhead: {maxConcurrent: %d, maxQueue: %d, maxWait: %v}", s.MaxConcurrent, s.MaxQueue, s.MaxWait)
		p.waits = s.MaxQueue > 0 && s.MaxWait == 0
		p.bh, err = limit.NewBulkhead(s)
		p.p = p.bh
	case kBreaker:
		s := breaker.Settings{OpenTimeout: time.Duration(pick(r, 10, 50, 200)) * tick, HalfOpenProbes: 1 + r.IntN(2)}
		if r.IntN(3) > 0 {
			s.ConsecutiveFailures = 1 + r.IntN(4)
		} else {
			s.FailureRate, s.MinCalls, s.WindowCalls = 0.5, 2+r.IntN(3), 10
		}
		if r.IntN(4) == 0 {
			s.MaxOpenTimeout = 4 * s.OpenTimeout
		}
		p.open = max(s.OpenTimeout, s.MaxOpenTimeout)
		p.panics = r.IntN(12) == 0
		if p.panics {
			s.OnStateChange = func(_, to breaker.State) {
				if to == breaker.StateOpen {
					cs.panicked("OnStateChange")
				}
			}
		}
		p.desc = fmt.Sprintf("breaker(%d consecutive,rate %v/%d,open %v,probes %d,panics=%t)", s.ConsecutiveFailures, s.FailureRate, s.MinCalls, s.OpenTimeout, s.HalfOpenProbes, p.panics)
		if !p.panics {
			p.spec = fmt.Sprintf("breaker: {consecutiveFailures: %d, failureRate: %v, minCalls: %d, windowCalls: %d, openTimeout: %v, maxOpenTimeout: %v, halfOpenProbes: %d}",
				s.ConsecutiveFailures, s.FailureRate, s.MinCalls, s.WindowCalls, s.OpenTimeout, s.MaxOpenTimeout, s.HalfOpenProbes)
		}
		p.br, err = breaker.New(s)
		p.p = p.br
	case kOwn:
		p.own = pick(r, ownWrap, ownTwice, ownPanic, ownPass)
		if depth > 0 && p.own == ownWrap {
			p.own = ownPass
		}
		switch p.own {
		case ownWrap:
			var ks []kind
			for range 1 + r.IntN(3) {
				k := kind(r.IntN(int(kOwn)))
				if k == kFallback {
					k = kHedge
				}
				ks = append(ks, k)
			}
			if r.IntN(2) == 0 {
				slices.SortStableFunc(ks, func(a, b kind) int { return rank[a] - rank[b] })
			}
			return cs.ownChain(ks)
		case ownTwice:
			p.desc = "own(twice)"
			p.p = twicePolicy{}
		case ownPanic:
			p.panicOn = r.Uint64()
			p.panics = true
			p.desc = "own(panics)"
			p.p = &panicPolicy{cs: cs, on: p.panicOn}
		case ownPass:
			p.desc = "own(pass)"
			p.p = passPolicy{}
		}
	}
	return p, err
}

// ownChain draws a user's own policy that runs a chain of policies of
// kinds ks.
func (cs *kase) ownChain(ks []kind) (*pol, error) {
	p := &pol{kind: kOwn, own: ownWrap}
	for _, k := range ks {
		q, err := cs.drawPolicy(k, 1)
		if err != nil {
			return nil, err
		}
		p.inner = append(p.inner, q)
	}
	inner := make([]chain.Policy, len(p.inner))
	var ds []string
	for i, q := range p.inner {
		inner[i], ds = q.p, append(ds, q.desc)
	}
	c, err := chain.New(inner...)
	if err != nil {
		return nil, err
	}
	p.desc = "own[" + strings.Join(ds, " → ") + "]"
	p.p = wrapPolicy{c}
	return p, nil
}

// templates are the shapes drawn a third of the time: where the
// policies meet around a hedge.
var templates = [][]kind{
	{kHedge},
	{kHedge, kTimeout},
	{kHedge, kLimit, kBreaker, kTimeout},
	{kHedge, kLimit, kTimeout},
	{kHedge, kThrottle, kTimeout},
	{kRetry, kHedge, kBreaker, kTimeout},
	{kRetry, kThrottle, kHedge, kLimit, kBreaker, kTimeout},
	{kTimeout, kRetry, kBreaker, kTimeout},
	{kHedge, kBulkhead, kTimeout},
	{kOwn},
	{kOwn, kBreaker},
}

// wrapPolicy is a user's own policy that runs a chain of its own.
type wrapPolicy struct{ c *chain.Chain }

func (w wrapPolicy) Do(ctx context.Context, call func(context.Context) error) error {
	return w.c.Do(ctx, call)
}

// passPolicy is a user's own policy that only passes the call on.
type passPolicy struct{}

func (passPolicy) Do(ctx context.Context, call func(context.Context) error) error { return call(ctx) }

// twicePolicy is a user's own naive hedger: two attempts at once, nil if
// either succeeds, after both have returned.
type twicePolicy struct{}

func (twicePolicy) Do(ctx context.Context, call func(context.Context) error) error {
	type outcome struct {
		err      error
		panicked any
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	outcomes := make(chan outcome, 2)
	one := func() {
		o := outcome{err: errGoexit}
		defer func() {
			if v := recover(); v != nil {
				o.panicked = v
				cancel() // the other attempt is of no use now
			}
			outcomes <- o
		}()
		o.err = call(ctx)
	}
	go one()
	one()
	a, b := <-outcomes, <-outcomes
	for _, o := range []outcome{a, b} {
		if o.panicked != nil {
			panic(o.panicked)
		}
	}
	if a.err == nil || b.err == nil {
		return nil
	}
	return b.err
}

var errGoexit = errors.New("interleave: the attempt did not return")

// panicPolicy is a user's own policy that panics once its call returned,
// on the calls it picks.
type panicPolicy struct {
	cs *kase
	on uint64
}

func (p *panicPolicy) Do(ctx context.Context, call func(context.Context) error) error {
	err := call(ctx)
	if i, ok := ctx.Value(callKey{}).(int); ok && p.on>>(i%64)&1 == 1 {
		p.cs.panicked("own policy")
	}
	return err
}

// callKey carries a call's index in its context.
type callKey struct{}

// drawChain draws a chain of 1 to 6 policies in a canonical order or not.
func (cs *kase) drawChain() error {
	r := cs.rng
	var ps []*pol
	if r.IntN(3) == 0 {
		// a shape where policies meet around a hedge, in its place
		t := templates[r.IntN(len(templates))]
		for _, k := range t {
			p, err := cs.drawPolicy(k, 0)
			if err != nil {
				return err
			}
			ps = append(ps, p)
		}
		if t[0] == kOwn { // a hedge in a user's own policy that wraps a chain
			p, err := cs.ownChain([]kind{kHedge, kTimeout})
			if err != nil {
				return err
			}
			ps[0] = p
		}
		cs.template = true
	} else {
		n := 1 + r.IntN(6)
		for range n {
			k := kind(r.IntN(int(nKinds)))
			if k == kOwn && r.IntN(2) == 0 { // fewer own policies than the others
				k = kHedge
			}
			p, err := cs.drawPolicy(k, 0)
			if err != nil {
				return err
			}
			ps = append(ps, p)
		}
		cs.canonical = r.IntN(2) == 0
	}
	if cs.canonical {
		slices.SortStableFunc(ps, func(a, b *pol) int { return rank[a.kind] - rank[b.kind] })
		// the first timeout is the overall one; the others attempt timeouts
		seen := false
		for i := 0; i < len(ps); i++ {
			if ps[i].kind != kTimeout {
				continue
			}
			if seen {
				q := ps[i]
				ps = append(ps[:i], ps[i+1:]...)
				ps = append(ps, q)
				break
			}
			seen = true
		}
	}
	cs.pols = ps
	policies := make([]chain.Policy, len(ps))
	for i, p := range ps {
		policies[i] = p.p
	}
	cs.strict = r.IntN(4) == 0
	if cs.viaSpec() {
		return cs.buildFromSpec()
	}
	var err error
	cs.chain, err = chain.Options{Strict: cs.strict}.New(policies...)
	return err
}

// viaSpec reports whether the case's chain is built from a spec file: a
// quarter of the chains a file can say (no fallback, no user's own
// policy, no panicking callback). The choice comes from the seed, not
// from rng, so that a seed's other draws are what they were before
// chains were built through spec.
func (cs *kase) viaSpec() bool {
	for _, p := range cs.pols {
		if p.spec == "" {
			return false
		}
	}
	return rand.New(rand.NewPCG(cs.seed, 0x5bec)).IntN(4) == 0
}

// buildFromSpec writes the drawn chain as a spec file, parses it, and
// makes the policies the case watches the ones the file built.
func (cs *kase) buildFromSpec() error {
	var b strings.Builder
	fmt.Fprintf(&b, "lint: {strict: %t}\nchain:\n", cs.strict)
	for _, p := range cs.pols {
		fmt.Fprintf(&b, "  - %s\n", p.spec)
	}
	sp, err := spec.Parse([]byte(b.String()))
	if err != nil {
		if !errors.As(err, new(chain.Finding)) && stats.specRefused == "" {
			stats.specRefused = fmt.Sprintf("%v\n%s", err, b.String())
		}
		return err
	}
	ps, err := sp.Policies()
	if err != nil {
		return err
	}
	for i, p := range cs.pols {
		p.p = ps[i]
		p.desc = "spec:" + p.desc
		switch v := ps[i].(type) {
		case *breaker.Breaker:
			p.br = v
		case *limit.Limiter:
			p.lim = v
		case *limit.Bulkhead:
			p.bh = v
		case *hedge.Policy:
			p.hg = v
		case *throttle.Throttle:
			p.th = v
		}
	}
	cs.chain, err = sp.Options().New(ps...)
	cs.fromSpec = err == nil
	return err
}

// walk calls f on every policy of the case, nested ones included.
func (cs *kase) walk(f func(*pol)) {
	var rec func([]*pol)
	rec = func(ps []*pol) {
		for _, p := range ps {
			f(p)
			rec(p.inner)
		}
	}
	rec(cs.pols)
}

func (cs *kase) has(pred func(*pol) bool) bool {
	found := false
	cs.walk(func(p *pol) { found = found || pred(p) })
	return found
}

func (cs *kase) chainString() string {
	var ds []string
	for _, p := range cs.pols {
		ds = append(ds, p.desc)
	}
	return strings.Join(ds, " → ")
}
