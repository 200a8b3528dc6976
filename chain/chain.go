package chain

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"
	"unique"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/internal/deferred"
	"github.com/callguard/callguard/internal/hold"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
)

// Policy is anything that can run a call: *breaker.Breaker, *retry.Policy,
// *timeout.Policy, *fallback.Policy, a *Chain, or a user's own.
type Policy interface {
	Do(ctx context.Context, call func(context.Context) error) error
}

// Chain runs a call through its policies, the first outermost. It is safe
// for concurrent use if its policies are (callguard's are). Create one with
// [New] or [Options.New]; the zero value, and a nil *Chain, run calls
// directly (every method accepts them).
type Chain struct {
	steps []step
	// findings are interned: the keys of a keyed set build chains alike,
	// and their findings' text is then kept once for all of them.
	findings []unique.Handle[Finding]
	holds    bool     // Do may make attempt contexts that Hold can keep
	opaque   bool     // some step is a policy the chain does not know
	first    stepFunc // runs step 0
}

type kind uint8

const (
	kindOpaque kind = iota
	kindBreaker
	kindRetry
	kindTimeout
	kindFallback
	kindHedge
	kindThrottle
	kindLimit
	kindBulkhead
)

type step struct {
	kind      kind
	inBreaker bool // a timeout inside a breaker: it judges attempts other deadlines end
	p         Policy

	// What the chain knows of its own policies beyond their public API,
	// resolved once by New (see internal/bridge).
	tx *bridge.Timeout
	rx *bridge.Retry
	fx *bridge.Fallback
	h  *hedgeStep // for a hedge step

	// next runs what is inside the step: the next step, or the call.
	next stepFunc
}

// hedgeStep is what a hedge step keeps beyond a step: kept apart so that
// the other steps (a keyed set keeps a chain per key) do not pay for it.
type hedgeStep struct {
	hx *bridge.Hedge
	hr sync.Pool // of *hedgeRunner
	// hoist is the index of the attempt timeout whose context the hedge
	// makes for each attempt, or -1: when only breakers, throttles,
	// limits that never queue and fixed timeouts lie inside the hedge,
	// the soonest of those timeouts is the attempt's deadline, made at
	// the hedge rather than a cancelable context there and a deadline
	// inside.
	hoist int
}

// stepFunc runs step i of c and everything inside it (i = len(c.steps):
// the call itself).
type stepFunc func(c *Chain, ctx context.Context, i int, f frame, call func(context.Context) error) error

// funcOf returns the function that runs a step of kind k.
func funcOf(k kind) stepFunc {
	switch k {
	case kindTimeout:
		return (*Chain).runTimeout
	case kindRetry:
		return (*Chain).runRetry
	case kindBreaker:
		return (*Chain).runBreaker
	case kindFallback:
		return (*Chain).runFallback
	case kindHedge:
		return (*Chain).runHedge
	case kindThrottle:
		return (*Chain).runThrottle
	case kindLimit, kindBulkhead:
		return (*Chain).runLimit
	}
	return (*Chain).runOpaque
}

// bp, rp, tp and fp return the step's policy as what its kind says it is.
func (s *step) bp() *breaker.Breaker { return s.p.(*breaker.Breaker) }
func (s *step) rp() *retry.Policy    { return s.p.(*retry.Policy) }
func (s *step) tp() *timeout.Policy  { return s.p.(*timeout.Policy) }
func (s *step) fp() *fallback.Policy { return s.p.(*fallback.Policy) }

// Options configure how a chain is linted.
type Options struct {
	// Strict turns every warning into an error: New fails on any finding.
	Strict bool
	// MaxDetection is the longest acceptable time for a breaker to notice a
	// hung downstream at one caller (rule CG004). 0: 10 s.
	MaxDetection time.Duration
	// DownstreamRecovery is how long the downstream usually takes to recover
	// from an outage, if known (rule CG012).
	DownstreamRecovery time.Duration
	// CallerDeadline is the deadline the chain's callers give a request,
	// if known (rule CG004: an attempt a deadline outside the breaker cuts
	// before it has run its timeout's patience is not a failure, so a
	// caller more impatient than that never lets a hung downstream trip
	// the breaker). 0: unknown; an overall timeout in the chain is used
	// either way.
	CallerDeadline time.Duration
	// Ignore lists finding codes to leave out, e.g. "CG009".
	Ignore []string
}

// New builds a chain of policies, the first outermost, and lints it with
// the default [Options]. It returns an error for a nil policy and for any
// finding of severity [SeverityError].
func New(policies ...Policy) (*Chain, error) { return Options{}.New(policies...) }

// New builds and lints a chain with these options.
func (o Options) New(policies ...Policy) (*Chain, error) {
	switch {
	case o.MaxDetection < 0:
		return nil, fmt.Errorf("chain: Options.MaxDetection = %v: must be >= 0 (0: the default, 10s)", o.MaxDetection)
	case o.DownstreamRecovery < 0:
		return nil, fmt.Errorf("chain: Options.DownstreamRecovery = %v: must be >= 0 (0: unknown)", o.DownstreamRecovery)
	case o.CallerDeadline < 0:
		return nil, fmt.Errorf("chain: Options.CallerDeadline = %v: must be >= 0 (0: unknown)", o.CallerDeadline)
	}
	c := &Chain{steps: make([]step, 0, len(policies))}
	for i, p := range policies {
		if p == nil || isNil(p) {
			return nil, fmt.Errorf("chain: policy #%d (index %d) is nil", i+1, i)
		}
		if zeroValue(p) {
			return nil, fmt.Errorf("chain: policy #%d (index %d) is a zero %T; make it with its package's New", i+1, i, p)
		}
		s := step{kind: kindOpaque, p: p}
		switch v := p.(type) {
		case *breaker.Breaker:
			s = step{kind: kindBreaker, p: p}
		case *retry.Policy:
			s = step{kind: kindRetry, rx: bridge.RetryOf(v), p: p}
		case *timeout.Policy:
			s = step{kind: kindTimeout, tx: bridge.TimeoutOf(v), p: p}
			c.holds = true
		case *fallback.Policy:
			s = step{kind: kindFallback, fx: bridge.FallbackOf(v), p: p}
		case *hedge.Policy:
			s = step{kind: kindHedge, h: &hedgeStep{hx: bridge.HedgeOf(v)}, p: p}
			c.holds = true // each attempt has a context of its own
		case *throttle.Throttle:
			s = step{kind: kindThrottle, p: p}
		case *limit.Limiter:
			s = step{kind: kindLimit, p: p}
		case *limit.Bulkhead:
			s = step{kind: kindBulkhead, p: p}
		}
		if s.kind == kindOpaque {
			c.holds, c.opaque = true, true // a nested Chain, or a policy that may run one
		}
		c.steps = append(c.steps, s)
	}
	c.first = (*Chain).runCall
	for i := len(c.steps) - 1; i >= 0; i-- {
		c.steps[i].next = c.first
		c.first = funcOf(c.steps[i].kind)
	}
	for i := range c.steps {
		if c.steps[i].kind == kindHedge {
			c.steps[i].h.hoist = c.hoistable(i)
		}
	}
	for i := range c.steps {
		if c.steps[i].kind != kindBreaker {
			continue
		}
		for j := i + 1; j < len(c.steps); j++ {
			if c.steps[j].kind == kindTimeout {
				c.steps[j].inBreaker = true
			}
		}
	}
	var errs []error
	for _, f := range lint(c.steps, o) {
		if o.ignored(f.Code) {
			continue
		}
		if o.Strict && f.Severity == SeverityWarning {
			f.Severity = SeverityError
		}
		if f.Severity == SeverityError {
			errs = append(errs, f)
			continue
		}
		c.findings = append(c.findings, unique.Make(f))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// hoistable returns the step whose attempt context the hedge step i can
// make (see hedgeStep.hoist), or -1.
func (c *Chain) hoistable(i int) int {
	best := -1
	for j := i + 1; j < len(c.steps); j++ {
		switch s := &c.steps[j]; s.kind {
		case kindBreaker, kindThrottle:
		case kindLimit:
			if s.p.(*limit.Limiter).Settings().MaxQueue > 0 {
				return -1 // a wait in its queue would count against the attempt's timeout
			}
		case kindBulkhead:
			if s.p.(*limit.Bulkhead).Settings().MaxQueue > 0 {
				return -1
			}
		case kindTimeout:
			if s.tx.Adaptive {
				return -1
			}
			if best < 0 || s.tx.D < c.steps[best].tx.D {
				best = j
			}
		default:
			return -1
		}
	}
	return best
}

// needsHolder reports whether calls of [Chain.Do] may run under attempt
// contexts that hold.Hold can keep alive: the chain has a [timeout.Policy],
// or a policy it does not know, such as a nested Chain, that may have one.
// When it reports false, Do never makes an attempt context, and an adapter
// can skip hold.WithHolder (or doHolding). A nil Chain needs none.
func (c *Chain) needsHolder() bool { return c != nil && c.holds }

func (o Options) ignored(code string) bool {
	for _, c := range o.Ignore {
		if c == code {
			return true
		}
	}
	return false
}

func isNil(p Policy) bool {
	v := reflect.ValueOf(p)
	switch v.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Chan, reflect.Slice, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// zeroValue reports a callguard policy that was not made by its package's
// New (whose zero value does nothing useful). A zero fallback passes
// through, as documented, and is allowed.
func zeroValue(p Policy) bool {
	switch v := p.(type) {
	case *retry.Policy:
		return v.Attempts() == 0
	case *timeout.Policy:
		return v.Timeout() == 0
	case *breaker.Breaker:
		s := v.Settings() // New fills in every default; FromGobreaker sets Engine
		return s.OpenTimeout == 0 && s.Engine != breaker.EngineGobreaker
	case *hedge.Policy:
		return v.Delay() == 0
	case *throttle.Throttle:
		return v.Settings().K == 0
	case *limit.Limiter:
		return v.Settings().Algorithm == nil
	case *limit.Bulkhead:
		return v.Settings().MaxConcurrent == 0
	}
	return false
}

func describe(p Policy) string {
	if s, ok := p.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", p)
}

// Policies returns the chain's policies, outermost first. Adapters that
// cannot run a call as one function, such as gRPC streams, use them.
func (c *Chain) Policies() []Policy {
	if c == nil {
		return nil
	}
	ps := make([]Policy, len(c.steps))
	for i, s := range c.steps {
		ps[i] = s.p
	}
	return ps
}

// Findings returns the findings that did not block construction: warnings
// and infos (none for a nil or zero Chain).
func (c *Chain) Findings() []Finding {
	if c == nil {
		return nil
	}
	if len(c.findings) == 0 {
		return nil
	}
	out := make([]Finding, len(c.findings))
	for i, h := range c.findings {
		out[i] = h.Value()
	}
	return out
}

// String renders the order, e.g.
// "timeout(2s) → retry(3) → breaker(5 consecutive, open 10s, 3 probes) → timeout(300ms)";
// "(empty chain)" for a nil or zero Chain, which runs calls directly. An
// adaptive timeout shows its value now.
func (c *Chain) String() string {
	if c == nil || len(c.steps) == 0 {
		return "(empty chain)"
	}
	names := make([]string, len(c.steps))
	for i, s := range c.steps {
		names[i] = describe(s.p)
	}
	return strings.Join(names, " → ")
}

// ErrNilCall is returned by [Chain.Do] for a nil call or a nil context:
// there is nothing to run, or nothing to run it under.
var ErrNilCall = errors.New("chain: Do: nil call or context")

// Do runs call through the chain. A nil call or context gets [ErrNilCall].
func (c *Chain) Do(ctx context.Context, call func(context.Context) error) error {
	if call == nil || ctx == nil {
		return ErrNilCall
	}
	if c == nil || len(c.steps) == 0 {
		return call(ctx)
	}
	return c.first(c, ctx, 0, frame{caller: ctx, owner: -1}, call)
}

// doHolding is Do under hold.WithHolder: call may keep its attempt context
// alive after it returns, with hold.Hold. It spares WithHolder's allocation
// unless the chain has a policy it does not know (which may run a chain of
// its own, and learns of the holding from the context).
func (c *Chain) doHolding(ctx context.Context, call func(context.Context) error) error {
	if call == nil || ctx == nil {
		return ErrNilCall
	}
	if c == nil || len(c.steps) == 0 {
		return call(ctx)
	}
	caller := ctx
	if c.opaque {
		ctx = hold.WithHolder(ctx)
	}
	return c.first(c, ctx, 0, frame{caller: caller, owner: -1, hold: true}, call)
}

func init() {
	bridge.ChainDoDeferred = func(c any, ctx context.Context, set any, call func(context.Context) error) error {
		return c.(*Chain).doDeferred(ctx, set.(*deferred.Set), call)
	}
	bridge.ChainDoHolding = func(c any, ctx context.Context, call func(context.Context) error) error {
		return c.(*Chain).doHolding(ctx, call)
	}
	bridge.ChainNeedsHolder = func(c any) bool { return c.(*Chain).needsHolder() }
	bridge.ChainVerdict = func(c any, i int, v bridge.Verdict) { c.(*Chain).verdict(i, v) }
}

// doDeferred is doHolding with the permits of successful attempts handed to
// set (see bridge.ChainDoDeferred).
func (c *Chain) doDeferred(ctx context.Context, set *deferred.Set, call func(context.Context) error) error {
	if call == nil || ctx == nil {
		return ErrNilCall
	}
	if c == nil || len(c.steps) == 0 {
		return call(ctx)
	}
	caller := ctx
	if c.opaque {
		ctx = hold.WithHolder(ctx)
	}
	return c.first(c, ctx, 0, frame{caller: caller, owner: -1, hold: true, deferred: set}, call)
}
