package retry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/internal/seeded"
	"github.com/cenkalti/backoff/v4"
)

// Defaults used by [New] when no option says otherwise.
const (
	DefaultMaxAttempts = 3
	DefaultInitial     = 100 * time.Millisecond
	DefaultMax         = 5 * time.Second
	DefaultJitter      = 0.2
	// DefaultMaxPushback is the longest server-requested wait a policy
	// honours; asked to wait longer, it gives up (see MaxPushback).
	DefaultMaxPushback = 30 * time.Second
)

// MaxAttemptsLimit is the most attempts [MaxAttempts] accepts.
const MaxAttemptsLimit = 10000

// Policy retries failed calls. It is safe for concurrent use; all calls
// share its budget, if it has one. Create one with [New]; the zero value is
// not usable.
type Policy struct {
	attempts    int
	initial     time.Duration
	max         time.Duration
	multiplier  float64
	jitter      float64
	rnd         *seeded.Rand // Rand's source of jitter; nil: math/rand's global one, through backoff/v4
	retryIf     func(error) bool
	whenOpen    bool
	fit         bool // FitDeadline
	rejected    bool // RetryRejected
	onRetry     func(attempt int, err error, wait time.Duration)
	budget      *Budget
	throttle    *Throttle
	maxPushback time.Duration
	description string
	x           bridge.Retry // what the chain knows of it (see hooks.go)
	stats       *retryStats  // counted for metrics; nil in the zero Policy
}

// retryStats counts what a policy did, on failures only: a success costs
// nothing.
type retryStats struct {
	retries   atomic.Uint64
	exhausted [ReasonOpen + 1]atomic.Uint64 // by Reason
}

// exhausted counts e's reason, and returns e.
func (p *Policy) exhausted(e *ExhaustedError) error {
	if p.stats != nil && e.Reason >= 0 && int(e.Reason) < len(p.stats.exhausted) {
		p.stats.exhausted[e.Reason].Add(1)
	}
	return e
}

// Option configures a [Policy].
type Option interface{ apply(*config) }

type config struct {
	Policy
	errs     []error
	schedule string
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

func bad(c *config, format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("retry: "+format, args...))
}

// MaxAttempts sets the number of attempts, counting the first call (default
// 3), at most [MaxAttemptsLimit]. MaxAttempts(1) never retries.
func MaxAttempts(n int) Option {
	return optionFunc(func(c *config) {
		switch {
		case n < 1:
			bad(c, "MaxAttempts(%d): must be >= 1 (it counts the first call)", n)
		case n > MaxAttemptsLimit:
			bad(c, "MaxAttempts(%d): at most %d; to retry until a deadline, bound the retries by the deadline or a budget instead", n, MaxAttemptsLimit)
		}
		c.attempts = n
	})
}

// Constant waits d between attempts.
func Constant(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 {
			bad(c, "Constant(%v): must be >= 0", d)
		}
		c.initial, c.max, c.multiplier, c.schedule = d, d, 1, "Constant"
	})
}

// Exponential waits initial, then twice as long after each failure, up to
// max (cenkalti/backoff/v4's ExponentialBackOff with Multiplier 2). This is
// the default schedule, from 100 ms to 5 s.
func Exponential(initial, max time.Duration) Option {
	return optionFunc(func(c *config) {
		switch {
		case initial < 0:
			bad(c, "Exponential(%v, %v): initial must be >= 0", initial, max)
		case max < initial:
			bad(c, "Exponential(%v, %v): max must be >= initial", initial, max)
		}
		c.initial, c.max, c.multiplier, c.schedule = initial, max, 2, "Exponential"
	})
}

// Jitter randomizes each wait by ± fraction of it, in [0, 1] (default 0.2).
// Jitter(0) gives exact waits.
func Jitter(fraction float64) Option {
	return optionFunc(func(c *config) {
		if !(fraction >= 0 && fraction <= 1) {
			bad(c, "Jitter(%v): must be within [0, 1]", fraction)
		}
		c.jitter = fraction
	})
}

// Rand draws the jitter from src rather than from math/rand's global
// source (backoff/v4's draw), so that a run can be replayed (a
// simulation, a test), and draws nothing from the global source: with
// rand.NewPCG(seed, seq), the same waits come in the same order. src is
// read under a lock of the policy's own, as math/rand/v2's sources are not
// safe for concurrent use; it is read only when a wait is jittered, never
// on a call that succeeds. A nil src is an error.
func Rand(src rand.Source) Option {
	return optionFunc(func(c *config) {
		if src == nil {
			bad(c, "Rand(nil): needs a source, e.g. rand.NewPCG(seed, 0)")
			return
		}
		c.rnd = seeded.New(src)
	})
}

// RetryIf decides which errors are worth another attempt (default: all). It
// is asked only about errors that the defaults do not already rule out: the
// caller's cancellation, permanent errors, local rejections
// (callguard.ErrRejected: a throttle, a limit or a bulkhead inside the
// retry refused the attempt, and would refuse the next one as well) and,
// without [RetryWhenOpen], breaker.ErrOpen.
func RetryIf(retryable func(error) bool) Option {
	return optionFunc(func(c *config) {
		if retryable == nil {
			bad(c, "RetryIf(nil): needs a function")
		}
		c.retryIf = retryable
	})
}

// RetryWhenOpen keeps retrying when a breaker rejects an attempt with
// breaker.ErrOpen, even when it will still be open after the wait. Each
// such rejection then costs a backoff wait for nothing; a chain's lint
// flags a retry with this option outside a breaker. And when an attempt's
// failure opens a breaker inside the retry, the retry waits until the
// breaker admits again, rather than give up (ReasonOpen). Without it, a
// retry gives up at once on ErrOpen unless the breaker may admit the next
// attempt by the end of the wait.
func RetryWhenOpen() Option {
	return optionFunc(func(c *config) { c.whenOpen = true })
}

// OnRetry registers a callback called before each wait, with the number of
// the attempt that failed (from 1), its error and the wait before the next
// one. It runs on the caller's goroutine.
func OnRetry(fn func(attempt int, err error, wait time.Duration)) Option {
	return optionFunc(func(c *config) { c.onRetry = fn })
}

// FitDeadline plans each wait against the deadline, so that the
// attempt after it still gets its whole attempt timeout: a wait that would
// leave the next attempt less than that before the deadline is shortened
// to leave it, down to no wait at all; when even no wait would leave less
// (the attempt timeout is longer than what is left), the wait is kept, for
// a rushed attempt would not get its time either and would only come
// sooner to a downstream that is slow. Without it, the wait is kept and
// the attempt after it gets what is left (with 1 s to the deadline, a
// 300 ms attempt timeout and waits of 100 and 200 ms, a third attempt
// after two hung ones starts at 900 ms and has 100 ms; with FitDeadline,
// at 700 ms, with its 300 ms).
//
// The deadline is the caller's (that of the context the chain was called
// with, or ctx's, for [Policy.Do] called directly), or a timeout's of the
// chain around the retry if sooner: the soonest that ends the retry's whole
// call. It is never an attempt's: a timeout inside the retry bounds its
// attempts, and none is ever hoisted past it into the context the retry
// runs in. The attempt timeout is the first timeout inside the retry in its
// chain (an adaptive timeout's value at the time); run alone, or with no
// timeout inside, the policy has none and its waits are as without the
// option. A wait a server asked for (a pushback) or one for an open
// breaker is the downstream's, and kept.
//
// It trades spacing for fit: near the deadline the last attempts follow
// each other sooner. The protection benchmark measures what it is worth
// (docs/protection.md).
func FitDeadline() Option {
	return optionFunc(func(c *config) { c.fit = true })
}

// RetryRejected retries an attempt that a policy inside the retry refused
// locally (callguard.ErrRejected: a concurrency limit, a bulkhead or a
// throttle) after the backoff wait, as a retryable failure, while the
// attempts and the caller's deadline allow; without it such a refusal ends
// the retries at once, since an attempt made at once would be refused too.
// A limit that refuses a burst (a sudden hang that fills its slots) then
// costs the requests it refuses a wait rather than their remaining
// attempts. The protection benchmark measures what it is worth
// (docs/protection.md, "Mechanisms").
func RetryRejected() Option {
	return optionFunc(func(c *config) { c.rejected = true })
}

// MaxPushback bounds the wait a server may ask for (Retry-After,
// grpc-retry-pushback-ms): asked to wait longer, the policy gives up with
// ReasonPushback instead of sleeping (default 30 s). The caller's deadline
// bounds it too.
func MaxPushback(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 {
			bad(c, "MaxPushback(%v): must be >= 0", d)
		}
		c.maxPushback = d
	})
}

// WithBudget makes retries draw from b. A budget may be shared by several
// policies.
func WithBudget(b *Budget) Option {
	return optionFunc(func(c *config) {
		if b == nil {
			bad(c, "WithBudget(nil): needs a budget from NewBudget")
		}
		c.budget = b
	})
}

// New returns a Policy, or an error naming the first invalid option.
func New(opts ...Option) (*Policy, error) {
	c := &config{Policy: Policy{
		attempts:   DefaultMaxAttempts,
		initial:    DefaultInitial,
		max:        DefaultMax,
		multiplier: 2,
		jitter:     DefaultJitter,

		maxPushback: DefaultMaxPushback,
	}}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("retry: nil Option")
		}
		o.apply(c)
	}
	if len(c.errs) > 0 {
		return nil, c.errs[0]
	}
	p := new(Policy)
	*p = c.Policy
	p.description = fmt.Sprintf("retry(%d", p.attempts)
	if p.fit {
		p.description += ", FitDeadline"
	}
	if p.rejected {
		p.description += ", RetryRejected"
	}
	p.description += ")"
	p.stats = new(retryStats)
	p.x = p.bridged()
	return p, nil
}

// Attempts returns the number of attempts, counting the first call.
func (p *Policy) Attempts() int { return p.attempts }

// waits returns the nominal waits between attempts (without jitter or
// pushback): Attempts()-1 durations.
func (p *Policy) waits() []time.Duration {
	if p.attempts < 2 {
		return nil
	}
	w := make([]time.Duration, 0, p.attempts-1)
	exact := *p
	exact.jitter = 0
	bo := exact.schedule()
	for range p.attempts - 1 {
		w = append(w, bo.NextBackOff())
	}
	return w
}

// String returns "retry(N)", N being the attempts, with ", FitDeadline"
// and ", RetryRejected" before the parenthesis when set.
func (p *Policy) String() string { return p.description }

// Do calls call, and calls it again while it fails with a retryable error,
// up to the policy's attempts. It returns nil on the first success, the
// error as is when it is not retryable, and an [*ExhaustedError] when the
// attempts, the caller's deadline or the budget end the retries.
func (p *Policy) Do(ctx context.Context, call func(context.Context) error) error {
	return p.doUntil(ctx, time.Time{}, 0, call)
}

// doUntil is Do with a deadline that the waits must respect besides ctx's
// own (zero: none). A chain passes the deadline of an enclosing timeout this
// way instead of making a context for it, and with FitDeadline the time an
// attempt is planned to take (reserve, 0: unknown).
func (p *Policy) doUntil(ctx context.Context, deadline time.Time, reserve time.Duration, call func(context.Context) error) error {
	if p.budget != nil {
		p.budget.deposit()
	}
	err := call(ctx)
	if err == nil {
		if p.throttle != nil {
			p.throttle.succeeded()
		}
		return nil
	}
	return p.again(ctx, deadline, reserve, call, err)
}

// cont retries a call whose first attempt was made outside the policy
// and failed with err, as when a stream's failure surfaces after it was
// created: it is doUntil without the first call (and without crediting a
// budget for a new call).
func (p *Policy) cont(ctx context.Context, deadline time.Time, reserve time.Duration, err error, call func(context.Context) error) error {
	if err == nil {
		return nil
	}
	return p.again(ctx, deadline, reserve, call, err)
}

// again runs the retries after a failed first attempt; only now is a
// schedule built.
func (p *Policy) again(ctx context.Context, deadline time.Time, reserve time.Duration, call func(context.Context) error, err error) error {
	var bo backoff.BackOff
	for attempt := 1; ; attempt++ {
		if !p.retryable(ctx, err) {
			return err
		}
		// A breaker rejected the attempt. Without RetryWhenOpen, give up at
		// once, unless the breaker says it may admit the next attempt by
		// the end of the wait (checked below): its open stay ends by then,
		// or it is half-open and only its probe quota was used up.
		var open *breaker.OpenError
		if errors.As(err, &open) && open.Forced {
			return err // forced open by an operator: no wait helps, RetryWhenOpen or not
		}
		open = nil
		rejected := !p.whenOpen && errors.Is(err, breaker.ErrOpen)
		if rejected && !errors.As(err, &open) {
			return err
		}
		// As grpc-go does: a retryable failure takes a token before the
		// attempts are counted, the last attempt's too.
		if p.throttle != nil && p.throttle.failed() {
			return p.exhausted(&ExhaustedError{Attempts: attempt, Last: err, Reason: ReasonBudget})
		}
		if attempt >= p.attempts {
			return p.exhausted(&ExhaustedError{Attempts: attempt, Last: err, Reason: ReasonAttempts})
		}
		var wait time.Duration
		if d, ok := pushback(err); ok {
			if d < 0 || d > p.maxPushback {
				return p.exhausted(&ExhaustedError{Attempts: attempt, Last: err, Reason: ReasonPushback})
			}
			wait = d
		} else {
			if bo == nil {
				bo = p.schedule()
			}
			wait = bo.NextBackOff()
			if p.rnd != nil && wait > 0 {
				wait = jittered(wait, p.jitter, p.rnd.Float64())
			}
			if wait < 0 {
				// backoff/v4 computes jittered waits in float64: one near
				// the largest Duration wraps around to a negative one.
				wait = math.MaxInt64
			}
		}
		now := time.Now()
		if rejected && !open.Probes && (open.Until.IsZero() || now.Add(wait).Before(open.Until)) {
			return err // still open when the wait ends
		}
		// The attempt after the wait would be rejected by a breaker inside
		// that is open (this attempt's failure may just have opened it):
		// give up now rather than wait for the rejection, or, retrying
		// when open, wait until the breaker admits again.
		at := admitAt(err)
		if at.After(now) && now.Add(wait).Before(at) {
			if !p.whenOpen {
				return p.exhausted(&ExhaustedError{Attempts: attempt, Last: err, Reason: ReasonOpen})
			}
			wait = at.Sub(now)
		}
		if dl, ok := ctx.Deadline(); ok && (deadline.IsZero() || dl.Before(deadline)) {
			deadline = dl
		}
		if p.fit && !deadline.IsZero() && reserve > 0 && !rejected && !at.After(now) {
			// Leave the next attempt its planned time before the deadline,
			// the wait shortened down to none (a wait for a pushback or an
			// open breaker is the downstream's, and kept). When even no
			// wait would not leave it that, the wait is kept: rushed, the
			// attempt would still not get its time, and would only come
			// sooner to a downstream that is slow.
			if _, pushed := pushback(err); !pushed {
				if room := deadline.Sub(now) - reserve; room >= 0 {
					wait = min(wait, room)
				}
			}
		}
		if !deadline.IsZero() && !now.Add(wait).Before(deadline) {
			return p.exhausted(&ExhaustedError{Attempts: attempt, Last: err, Reason: ReasonDeadline})
		}
		if p.budget != nil && !p.budget.withdraw() {
			return p.exhausted(&ExhaustedError{Attempts: attempt, Last: err, Reason: ReasonBudget})
		}
		if p.stats != nil {
			p.stats.retries.Add(1)
		}
		if p.onRetry != nil {
			p.onRetry(attempt, err, wait)
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return p.exhausted(canceled(ctx, attempt, err))
			case <-t.C:
			}
		}
		actx := ctx
		if attempt+1 >= p.attempts {
			actx = bridge.WithLastAttempt(ctx) // no retry follows it
		}
		if err = call(actx); err == nil {
			if p.throttle != nil {
				p.throttle.succeeded()
			}
			return nil
		}
	}
}

// admitAt finds, in err's tree, the latest instant at which an open breaker
// inside the retry admits a call again (zero: none said).
func admitAt(err error) time.Time {
	var at time.Time
	for err != nil {
		switch e := err.(type) {
		case *bridge.OpenAfter:
			if e.Until.After(at) {
				at = e.Until
			}
			err = e.Err
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				if t := admitAt(inner); t.After(at) {
					at = t
				}
			}
			return at
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		default:
			return at
		}
	}
	return at
}

// schedule returns a fresh backoff schedule: one per call, since
// backoff.ExponentialBackOff is not safe for concurrent use. A schedule
// without backoff/v4's own jitter — none asked for, or jittered from
// p.rnd after NextBackOff — is exact: ExponentialBackOff.NextBackOff
// draws from math/rand's global source even with RandomizationFactor 0,
// and a draw thrown away there would still move the draws of everything
// else that seeds that source.
func (p *Policy) schedule() backoff.BackOff {
	if p.initial > p.max { // ExponentialBy with a multiplier below 1
		s := &shrinking{initial: float64(p.initial), next: float64(p.initial), max: p.max, multiplier: p.multiplier}
		if p.rnd == nil {
			s.jitter = p.jitter // p.rnd jitters the waits in again
		}
		return s
	}
	if p.rnd != nil || p.jitter == 0 {
		return &exact{initial: p.initial, next: p.initial, multiplier: p.multiplier, max: p.max}
	}
	bo := &backoff.ExponentialBackOff{
		InitialInterval:     p.initial,
		RandomizationFactor: p.jitter,
		Multiplier:          p.multiplier,
		MaxInterval:         p.max,
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	bo.Reset()
	return bo
}

// exact is backoff/v4's ExponentialBackOff without its randomization and
// without its draw: initial, then multiplier times as long, up to max,
// with ExponentialBackOff's arithmetic (incrementCurrentInterval).
type exact struct {
	initial, next, max time.Duration
	multiplier         float64
}

func (e *exact) NextBackOff() time.Duration {
	d := e.next
	if float64(e.next) >= float64(e.max)/e.multiplier {
		e.next = e.max
	} else {
		e.next = time.Duration(float64(e.next) * e.multiplier)
	}
	return d
}

func (e *exact) Reset() { e.next = e.initial }

func (p *Policy) retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var perm *backoff.PermanentError
	if errors.As(err, &perm) {
		return false
	}
	if errors.Is(err, callguard.ErrRejected) && !p.rejected {
		return false // refused locally (throttle, limit, bulkhead): another attempt now would be too
	}
	return p.retryIf == nil || p.retryIf(err)
}

// Permanent marks err as not worth retrying. It is backoff.Permanent: errors
// wrapped by either are recognized.
func Permanent(err error) error { return backoff.Permanent(err) }

// jittered spreads d over [d - f·d, d + f·d] with r in [0, 1), as
// backoff/v4 does with its own draw.
func jittered(d time.Duration, f, r float64) time.Duration {
	if f == 0 {
		return d
	}
	delta := f * float64(d)
	lo, hi := float64(d)-delta, float64(d)+delta
	return time.Duration(lo + r*(hi-lo+1))
}
