// Package preset builds callguard's recommended chain — the one the
// protection benchmark judged best (docs/protection.md) — with each of its
// settings tunable and the rest kept:
//
//	retry (3 attempts, 100 ms → 1 s, waits fit to the deadline) →
//	limit (Gradient2) → breaker (10 consecutive failures over at least
//	500 ms, with no success between: a downstream that is down or hung;
//	open 800 ms, 2 of 3 probes to close, overload refusals left to the
//	limit) → adaptive attempt timeout (p99 × 1.5 over 5 s, from 300 ms,
//	at most 1 s)
//
// and its hedging variant, with a hedge after the observed p95 and a 10 %
// retry budget. The adapters' Standard (httpmw.Standard, grpcmw.Standard)
// build one such chain per host or per method; Chain builds one for a
// chain of your own.
//
// A chain built here is linted strictly: a setting that makes the lint
// warn is an error at construction, naming the setting.
package preset

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// The recommended values, which a zero field of Settings keeps.
const (
	DefaultAttempts          = 3
	DefaultBackoff           = 100 * time.Millisecond
	DefaultMaxBackoff        = time.Second
	DefaultAttemptTimeout    = 300 * time.Millisecond
	DefaultMaxAttemptTimeout = time.Second
	DefaultOpenTimeout       = 800 * time.Millisecond
	DefaultHalfOpenSuccesses = 2
	DefaultHedgeDelay        = 100 * time.Millisecond
	DefaultRetryBudget       = 0.1
	// DefaultConsecutiveFor is how long the breaker's run of
	// breaker.DefaultConsecutiveFailures failures must last, with no
	// success between, before it opens: the breaker is for a downstream
	// that is down or hung, which fails every call for as long as it is;
	// a downstream that answers some of its calls is neither, and the
	// retry does better there than a refusal (docs/faults.md). Under
	// concurrency, ten failures in a row come within milliseconds from a
	// downstream failing 70 % of its calls; one that answers even one call
	// in ten answers one within half a second at the loads the retry's
	// waits leave. There is no rate rule: a rate of failures between
	// "some" and "all" is what the retry is for.
	DefaultConsecutiveFor = 500 * time.Millisecond
	// DefaultMaxKeys is how many hosts or methods the adapters' Standard
	// keeps a chain for; past it, a keyed set's overflow chain serves the
	// rest (see httpmw.KeyStats, grpcmw.KeyStats).
	DefaultMaxKeys = 256
)

// Settings tune the recommended chain. A zero field keeps the
// recommended value (the Default constants).
type Settings struct {
	// Attempts is the retry's attempts, the first included.
	Attempts int
	// Backoff and MaxBackoff are the retry's exponential waits: Backoff
	// before the first retry, doubling up to MaxBackoff, jittered ±20 %.
	Backoff, MaxBackoff time.Duration
	// AttemptTimeout is the attempt timeout's start, before the adaptive
	// timeout has seen enough answers; MinAttemptTimeout and
	// MaxAttemptTimeout bound it (MinAttemptTimeout: AttemptTimeout / 10
	// when zero). Against a downstream whose healthy p99 is far below a
	// millisecond, the adaptive timeout sits at its floor, and a storage
	// stall of tens of milliseconds counts as a failure: give
	// MinAttemptTimeout a value above the stalls the downstream has when
	// healthy (docs/grpc.md, "Client libraries with their own retry").
	AttemptTimeout, MinAttemptTimeout, MaxAttemptTimeout time.Duration
	// OpenTimeout is the breaker's stay open before its probes.
	OpenTimeout time.Duration
	// HalfOpenSuccesses is how many of the breaker's 3 probes must succeed
	// to close it.
	HalfOpenSuccesses int
	// NoLimit leaves the adaptive concurrency limit out.
	NoLimit bool
	// Hedge adds a hedge inside the retry, after the observed p95 (from
	// HedgeDelay), with a retry budget (RetryBudget) so that hedges and
	// retries do not multiply on a slow, failing downstream (CG023).
	Hedge bool
	// HedgeDelay is the hedge's delay until it has seen enough answers.
	HedgeDelay time.Duration
	// RetryBudget is the retry budget's ratio with Hedge (retries per
	// call, on average).
	RetryBudget float64
	// Name names the breaker (in metrics and logs; the adapters' keys tell
	// their chains apart without it).
	Name string
	// Rand, if set, is the source of the retry's jitter (retry.Rand), for
	// a run that must be replayed (a simulation, a test); nil: math/rand/v2's
	// global source. The chain reads it under a lock of its own; give each
	// chain a source of its own.
	Rand rand.Source
}

// withDefaults fills the zero fields.
func (s Settings) withDefaults() Settings {
	set := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if s.Attempts == 0 {
		s.Attempts = DefaultAttempts
	}
	set(&s.Backoff, DefaultBackoff)
	set(&s.MaxBackoff, DefaultMaxBackoff)
	set(&s.AttemptTimeout, DefaultAttemptTimeout)
	set(&s.MaxAttemptTimeout, DefaultMaxAttemptTimeout)
	set(&s.OpenTimeout, DefaultOpenTimeout)
	set(&s.HedgeDelay, DefaultHedgeDelay)
	if s.HalfOpenSuccesses == 0 {
		s.HalfOpenSuccesses = DefaultHalfOpenSuccesses
	}
	if s.RetryBudget == 0 {
		s.RetryBudget = DefaultRetryBudget
	}
	return s
}

// Chain builds the recommended chain with s; overloaded reports the
// downstream's overload refusals (grpcmw.Overloaded, httpmw.Overloaded),
// which the breaker leaves to the limit (nil: none). Every invalid
// setting is an error naming it, and so is a finding of the strict lint.
func Chain(s Settings, overloaded func(error) bool) (*chain.Chain, error) {
	s = s.withDefaults()
	ropts := []retry.Option{retry.MaxAttempts(s.Attempts), retry.Exponential(s.Backoff, s.MaxBackoff), retry.FitDeadline()}
	if s.Rand != nil {
		ropts = append(ropts, retry.Rand(s.Rand))
	}
	if s.Hedge {
		b, err := retry.NewBudget(s.RetryBudget, 0)
		if err != nil {
			return nil, fmt.Errorf("preset: Settings.RetryBudget: %w", err)
		}
		ropts = append(ropts, retry.WithBudget(b))
	}
	r, err := retry.New(ropts...)
	if err != nil {
		return nil, fmt.Errorf("preset: Settings.Attempts, Backoff or MaxBackoff: %w", err)
	}
	ps := []chain.Policy{r}
	if s.Hedge {
		h, err := hedge.New(hedge.Settings{Delay: s.HedgeDelay, Quantile: 0.95})
		if err != nil {
			return nil, fmt.Errorf("preset: Settings.HedgeDelay: %w", err)
		}
		ps = append(ps, h)
	}
	if !s.NoLimit {
		l, err := limit.New(limit.Settings{})
		if err != nil {
			return nil, fmt.Errorf("preset: the limit: %w", err)
		}
		ps = append(ps, l)
	}
	b, err := breaker.New(breaker.Settings{
		Name:                s.Name,
		ConsecutiveFailures: breaker.DefaultConsecutiveFailures,
		ConsecutiveFor:      DefaultConsecutiveFor,
		OpenTimeout:         s.OpenTimeout, HalfOpenSuccesses: s.HalfOpenSuccesses, IsExcluded: overloaded,
	})
	if err != nil {
		return nil, fmt.Errorf("preset: Settings.OpenTimeout or HalfOpenSuccesses: %w", err)
	}
	attempt, err := timeout.New(s.AttemptTimeout, timeout.Adaptive(timeout.AdaptiveOptions{
		Quantile: 0.99, Window: 5 * time.Second, Min: s.MinAttemptTimeout, Max: s.MaxAttemptTimeout,
	}))
	if err != nil {
		return nil, fmt.Errorf("preset: Settings.AttemptTimeout, MinAttemptTimeout or MaxAttemptTimeout: %w", err)
	}
	c, err := chain.Options{Strict: true}.New(append(ps, b, attempt)...)
	if err != nil {
		return nil, fmt.Errorf("preset: %w", err)
	}
	return c, nil
}
