package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/scenario"
	"github.com/callguard/callguard/internal/seeded"
	"github.com/cenkalti/backoff/v4"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"
	"github.com/sony/gobreaker/v2"
)

// The peer stacks of the protection benchmark: retry → breaker →
// per-attempt timeout built with peer libraries, each configured as its own
// documentation shows for a service call, nothing tuned for the benchmark.
// Where the documentation leaves a setting open, the library's documented
// default is used, and config says so. Each new builds a fresh stack; call
// it inside the synctest bubble of the run, since the breakers and timers
// read the clock.
//
// Sources (failsafe-go v0.9.8's README sends readers to failsafe-go.dev,
// whose pages are the repository failsafe-go/failsafe-go.dev):
//
//   - Order: failsafe-go.dev policies.md, "Composition Recommendations": a
//     RetryPolicy, then a CircuitBreaker, then "a Timeout as the inner-most
//     policy"; timeout.md: "When a Timeout is composed inside a RetryPolicy,
//     each attempt will get its own timeout".
//   - Retry: http.md, "Retrying HTTP Failures":
//     WithBackoff(time.Second, 30*time.Second).WithMaxRetries(3) (retry.md's
//     and index.md's examples also use WithMaxRetries(3)); no jitter (not in
//     those examples; retry.md: jitter is something "you can also combine").
//     Every error is retried (retrypolicy.Builder doc: "By default, any
//     error is considered a failure and will be handled by the policy").
//   - Breaker: circuit-breaker.md, Usage: "Opens after 5 failures,
//     half-opens after 1 minute, closes after 2 successes":
//     WithFailureThreshold(5).WithDelay(time.Minute).WithSuccessThreshold(2);
//     every error counted (circuitbreaker.Builder doc, as for retries).
//   - Timeout: failsafe-go has no default; its module's example
//     (examples/http_test.go, TestHttpWithTimeout: "Create a Timeout for 1
//     second") uses timeout.New(time.Second); failsafe-go.dev timeout.md
//     shows 10 s. 1 s is used for both peers.
//   - Budget: budget/budget.go: "New returns a new budget with a default
//     maxRate of .2 and minConcurrency of 3"; retrypolicy.Builder.WithBudget:
//     "When the retryBudget is exceeded, retries will stop with
//     budget.ErrExceeded"; execution-budgets.md: "Budgets limit the total
//     number of concurrent retries or hedges across a system" and "should
//     be shared across a system" (one per stack here).
//   - gobreaker/v2 v2.4.0: its README gives no recommended settings, only
//     the defaults of a zero Settings: MaxRequests 0 → "allows only 1
//     request" when half-open, Interval 0 → "doesn't clear the internal
//     Counts during the closed state", Timeout 0 → "60 seconds", ReadyToTrip
//     nil → "returns true when the number of consecutive failures is more
//     than 5", IsSuccessful nil → every non-nil error is a failure. The call
//     goes through cb.Execute, as the README's example does.
//   - backoff/v4 v4.3.0: its README sends readers to pkg.go.dev, whose
//     examples (example_test.go, ExampleRetryContext) are
//     Retry(operation, WithContext(NewExponentialBackOff(), ctx)); the
//     ExponentialBackOff keeps its defaults (500 ms, ×1.5, randomization
//     0.5, max interval 60 s, max elapsed 15 min), bounded to failsafe-go's
//     number of attempts by WithMaxRetries (tries.go). Every error is
//     retried (retry.go: only a *PermanentError stops it).
type peerStack struct {
	name, config string
	new          func(seed uint64) (scenario.Stack, error)
}

// The per-attempt timeout of both peers: failsafe-go's own example's value
// (examples/http_test.go), no library default exists.
const peerAttemptTimeout = time.Second

// peerRetries is the retries after the first attempt: failsafe-go.dev
// http.md's WithMaxRetries(3), so 4 attempts; the hand-wired retry is
// bounded the same way.
const peerRetries = 3

const (
	peerFailsafeConfig = "retry 4 attempts (3 retries), backoff 1s→30s ×2, no jitter (default), every error retried, breaker-open too (default); " +
		"breaker opens on 5 consecutive failures, every error counted (default), open 1m, closes on 2 of 2 probes; " +
		"timeout 1s per attempt (no default; failsafe-go's example)"
	peerBudgetConfig = "; retry budget (budget.New defaults): retries at most 0.2 of in-flight executions, at least 3 concurrent, exceeded → stop retrying"
)

var peerStacks = []peerStack{
	{
		name:   "failsafe",
		config: peerFailsafeConfig,
		new:    func(uint64) (scenario.Stack, error) { return newPeerFailsafe(false), nil },
	},
	{
		name:   "failsafe-budget",
		config: peerFailsafeConfig + peerBudgetConfig,
		new:    func(uint64) (scenario.Stack, error) { return newPeerFailsafe(true), nil },
	},
	{
		name: "handwired",
		config: "retry (backoff/v4) 4 attempts (WithMaxRetries 3), ExponentialBackOff defaults 500ms ×1.5 ±50% (max 60s, max elapsed 15m), " +
			"every error retried, breaker-open too, stops with the caller's context (WithContext); " +
			"breaker (gobreaker/v2 defaults) opens on more than 5 (6) consecutive failures, every error counted, counts not cleared while closed, open 60s, closes on 1 of 1 probe; " +
			"timeout 1s per attempt (context.WithTimeout, failsafe-go's)",
		new: newPeerHandwired,
	},
}

// newPeerFailsafe is failsafe.With(retryPolicy, circuitBreaker, timeout):
// the retry outermost, the timeout innermost, so that each attempt gets its
// own timeout. The execution runs with the caller's context, so that its
// deadline bounds the retries and their delays, and the fn hands the
// attempt's context (a child that the timeout cancels) to call.
func newPeerFailsafe(withBudget bool) scenario.Stack {
	rb := retrypolicy.NewBuilder[any]().
		WithBackoff(time.Second, 30*time.Second).
		WithMaxRetries(peerRetries)
	if withBudget {
		rb = rb.WithBudget(budget.New())
	}
	cb := circuitbreaker.NewBuilder[any]().
		WithFailureThreshold(5).
		WithDelay(time.Minute).
		WithSuccessThreshold(2).
		Build()
	ex := failsafe.With[any](rb.Build(), cb, fstimeout.New[any](peerAttemptTimeout))
	return scenario.StackFunc(func(ctx context.Context, call func(context.Context) error) error {
		return ex.WithContext(ctx).RunWithExecution(func(e failsafe.Execution[any]) error {
			return call(e.Context())
		})
	})
}

// newPeerHandwired is backoff.Retry around gobreaker's Execute around a
// context.WithTimeout per attempt, as the existing chain benchmark's
// hand-wired stack is built, with the libraries' defaults.
func newPeerHandwired(uint64) (scenario.Stack, error) {
	cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{Name: "downstream"})
	return scenario.StackFunc(func(ctx context.Context, call func(context.Context) error) error {
		attempt := func() error {
			_, err := cb.Execute(func() (struct{}, error) {
				actx, cancel := context.WithTimeout(ctx, peerAttemptTimeout)
				defer cancel()
				return struct{}{}, call(actx)
			})
			return err
		}
		// An ExponentialBackOff is stateful (not safe for concurrent use):
		// one per request.
		bo := backoff.WithContext(backoff.WithMaxRetries(backoff.NewExponentialBackOff(), peerRetries), ctx)
		return backoff.Retry(attempt, bo)
	}), nil
}

// TestPeerStacksWork runs each peer stack (as documented, at callguard's
// numbers, at parity) once on the outage scenario under
// the open60 load, in virtual time, and checks that it runs, that its
// healthy warm-up carries the offered load, and that its breaker rejects
// calls during the outage.
func TestPeerStacksWork(t *testing.T) {
	sc, ld := scenario.Scenarios[0], scenario.Loads[0]
	if sc.Name != "outage" || ld.Name != "open60" {
		t.Fatalf("scenario %q, load %q: want outage, open60", sc.Name, ld.Name)
	}
	cell := scenario.Cell{Server: scenario.Model, Scenario: sc, Load: ld, Seed: 1}
	var all []stackDef
	for _, p := range peerStacks {
		all = append(all, stackDef(p))
	}
	all = append(append(all, samePeers(recommended)...), parityPeers(recommended)...)
	for _, p := range all {
		t.Run(p.name, func(t *testing.T) {
			t.Log(p.config)
			synctest.Test(t, func(t *testing.T) {
				st, err := p.new(cell.Seed)
				if err != nil {
					t.Fatal(err)
				}
				res, err := scenario.Run(cell, st)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("successes %d, detect %v, recover %v, amplification %.3f, p99 %v (baseline %.1f/s, offered %.1f/s)",
					res.Successes, res.Detect, res.Recover, res.Amplification, res.P99, res.Baseline, ld.Rate)
				if d := res.Baseline/ld.Rate - 1; d < -0.1 || d > 0.1 {
					t.Errorf("warm-up baseline %.1f/s, offered %.1f/s: off by %+.1f %%", res.Baseline, ld.Rate, 100*d)
				}
				if res.Detect < 0 {
					t.Error("the breaker rejected no request during the outage (Detect -1)")
				}
			})
		})
	}
}

// samePeers are the peers with callguard's numbers: the retry's attempts
// and backoff, the breaker's trip rule, open stay and probes, the attempt
// timeout of the chain c (fixed at c's starting value where c's is
// adaptive; a growing stay is not grown). They compare the mechanisms at
// equal settings, where the documented peers compare the defaults.
// tripRule is the breaker's trip rule of the chain c: its count of
// consecutive failures and its failure rate, the breaker's defaults when
// c sets neither.
func (c cg) tripRule() (consecutive int, rate float64) {
	if c.consecutive == 0 && c.rate == 0 {
		return breaker.DefaultConsecutiveFailures, breaker.DefaultFailureRate
	}
	return c.consecutive, c.rate
}

func samePeers(c cg) []stackDef {
	consecutive, rate := c.tripRule()
	probes := max(c.probes, 3)
	closeOn := probes
	if c.successes > 0 {
		closeOn = c.successes
	}
	retries := c.attempts - 1
	fsRule := fmt.Sprintf("%g%% of at least 20 calls over 10s", 100*rate)
	if rate == 0 {
		fsRule = fmt.Sprintf("%d consecutive failures", consecutive)
	}
	fsConfig := fmt.Sprintf("retry %d attempts, backoff %v→%v ×2, jitter 0.2, every error retried, breaker-open too (default); breaker opens on %s (one rule only: failsafe-go takes a count or a rate), open %v, closes on %d of %d probes; timeout %v per attempt",
		c.attempts, c.initial, c.max, fsRule, c.open, closeOn, probes, c.attempt)
	hwRule := fmt.Sprintf("%d consecutive failures or %g%% of at least 20 calls over 10s (10 buckets)", consecutive, 100*rate)
	if rate == 0 {
		hwRule = fmt.Sprintf("%d consecutive failures", consecutive)
	}
	hwConfig := fmt.Sprintf("retry (backoff/v4) %d attempts, backoff %v→%v ×2, jitter 0.2, every error retried, breaker-open too; breaker (gobreaker/v2) opens on %s, open %v, closes on %d of %d probes (gobreaker: all must succeed); timeout %v per attempt",
		c.attempts, c.initial, c.max, hwRule, c.open, probes, probes, c.attempt)
	return []stackDef{
		{"failsafe-same", fsConfig, func(seed uint64) (scenario.Stack, error) {
			rp := retrypolicy.NewBuilder[any]().WithDelayFunc(failsafeBackoff(c.initial, c.max, seed)).WithMaxRetries(retries).Build()
			cbb := circuitbreaker.NewBuilder[any]().WithDelay(c.open).WithSuccessThresholdRatio(uint(closeOn), uint(probes))
			if rate > 0 {
				cbb = cbb.WithFailureRateThreshold(rate, 20, 10*time.Second)
			} else {
				cbb = cbb.WithFailureThreshold(uint(consecutive))
			}
			ex := failsafe.With[any](rp, cbb.Build(), fstimeout.New[any](c.attempt))
			return scenario.StackFunc(func(ctx context.Context, call func(context.Context) error) error {
				return ex.WithContext(ctx).RunWithExecution(func(e failsafe.Execution[any]) error {
					return call(e.Context())
				})
			}), nil
		}},
		{"handwired-same", hwConfig, func(uint64) (scenario.Stack, error) {
			cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
				Name: "downstream", MaxRequests: uint32(probes), Interval: 10 * time.Second, BucketPeriod: time.Second, Timeout: c.open,
				ReadyToTrip: func(n gobreaker.Counts) bool {
					return int(n.ConsecutiveFailures) >= consecutive ||
						rate > 0 && n.Requests >= 20 && float64(n.TotalFailures) >= rate*float64(n.Requests)
				},
			})
			return scenario.StackFunc(func(ctx context.Context, call func(context.Context) error) error {
				attempt := func() error {
					_, err := cb.Execute(func() (struct{}, error) {
						actx, cancel := context.WithTimeout(ctx, c.attempt)
						defer cancel()
						return struct{}{}, call(actx)
					})
					return err
				}
				eb := backoff.NewExponentialBackOff()
				eb.InitialInterval, eb.MaxInterval, eb.Multiplier, eb.RandomizationFactor = c.initial, c.max, 2, 0.2
				return backoff.Retry(attempt, backoff.WithContext(backoff.WithMaxRetries(eb, uint64(retries)), ctx))
			}), nil
		}},
	}
}

// failsafeBackoff is what failsafe-go's WithBackoff(initial, max) with
// WithJitterFactor(0.2) computes (retrypolicy/retryexecutor.go, getDelay:
// the delay doubles from initial up to max, then
// internal/util.RandomDelayFactor multiplies it by 1 + (1 − 2r) × 0.2),
// with r drawn from the run's seed instead of math/rand/v2's global
// source, which no seed reaches: the same waits, in distribution, and runs
// that replay. After the k-th attempt failed, exec.Attempts() is k.
func failsafeBackoff(initial, most time.Duration, seed uint64) failsafe.DelayFunc[any] {
	rng := seeded.New(rand.NewPCG(seed, 0xfa15))
	return func(exec failsafe.ExecutionAttempt[any]) time.Duration {
		d := initial
		for k := 1; k < exec.Attempts() && d < most; k++ {
			d *= 2
		}
		d = min(d, most)
		return time.Duration(float64(d) * (1 + (1-2*rng.Float64())*0.2))
	}
}

// TestFailsafeBackoff: the parity and same-numbers peers' DelayFunc waits
// as failsafe-go's WithBackoff(100ms, 1s).WithJitterFactor(0.2) does —
// 100 ms, then 200 ms, 400 ms, … up to 1 s, each ±20 % — and a seed
// replays its draws.
func TestFailsafeBackoff(t *testing.T) {
	waits := func(seed uint64) []time.Duration {
		var out []time.Duration
		d := failsafeBackoff(100*time.Millisecond, time.Second, seed)
		ex := failsafe.With[any](retrypolicy.NewBuilder[any]().WithMaxRetries(5).WithDelayFunc(func(e failsafe.ExecutionAttempt[any]) time.Duration {
			w := d(e)
			out = append(out, w)
			return 0 // the test's run does not wait
		}).Build())
		_ = ex.Run(func() error { return errors.New("fails") })
		return out
	}
	a, b := waits(7), waits(7)
	if !slices.Equal(a, b) {
		t.Errorf("seed 7 twice: %v, then %v", a, b)
	}
	base := []time.Duration{100, 200, 400, 800, 1000}
	if len(a) != len(base) {
		t.Fatalf("%d waits %v; want %d", len(a), a, len(base))
	}
	for i, w := range a {
		mid := base[i] * time.Millisecond
		if lo, hi := mid*8/10, mid*12/10; w < lo || w > hi {
			t.Errorf("wait %d: %v, outside [%v, %v]", i+1, w, lo, hi)
		}
	}
	if slices.Equal(a, waits(8)) {
		t.Errorf("seeds 7 and 8 drew the same waits %v", a)
	}
}
