package chain_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
	"github.com/sony/gobreaker/v2"
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func codes(fs []chain.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Code)
	}
	return out
}

var (
	fiveConsecutive = breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second}
	ok              = func(context.Context, error) error { return nil }
)

func br(s breaker.Settings) *breaker.Breaker      { return must(breaker.New(s)) }
func hg(s hedge.Settings) *hedge.Policy           { return must(hedge.New(s)) }
func bh(s limit.BulkheadSettings) *limit.Bulkhead { return must(limit.NewBulkhead(s)) }
func th() *throttle.Throttle                      { return must(throttle.New(throttle.Settings{})) }
func budget() retry.Option                        { return retry.WithBudget(must(retry.NewBudget(0.1, 10))) }
func rt(opts ...retry.Option) *retry.Policy       { return must(retry.New(opts...)) }
func to(d time.Duration, opts ...timeout.Option) *timeout.Policy {
	return must(timeout.New(d, opts...))
}

// canonical is the order the lint is silent on.
func canonical() []chain.Policy {
	return []chain.Policy{
		must(fallback.New(ok)),
		to(5 * time.Second),
		rt(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second)),
		br(fiveConsecutive),
		to(300*time.Millisecond, timeout.Latency(0.99, 200*time.Millisecond)),
	}
}

func TestCanonicalChainIsClean(t *testing.T) {
	c, err := chain.Options{Strict: true, DownstreamRecovery: 20 * time.Second}.New(canonical()...)
	if err != nil {
		t.Fatalf("strict lint of the canonical order: %v", err)
	}
	want := "fallback(open) → timeout(5s) → retry(3) → breaker(5 consecutive, open 30s, 3 probes) → timeout(300ms)"
	if c.String() != want {
		t.Errorf("String() = %q, want %q", c.String(), want)
	}
}

// TestRules triggers each rule with the smallest bad chain, checks the
// numbers in its message, and checks that the fixed chain is silent on it.
func TestRules(t *testing.T) {
	for _, tc := range []struct {
		code      string
		opts      chain.Options
		bad, good []chain.Policy
		numbers   []string // must appear in the message
	}{
		{
			code:    "CG001",
			bad:     []chain.Policy{rt(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second), retry.RetryWhenOpen()), br(fiveConsecutive), to(time.Second)},
			good:    []chain.Policy{rt(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second)), br(fiveConsecutive), to(time.Second)},
			numbers: []string{"≈ 300ms", "100ms + 200ms"},
		},
		{
			code:    "CG002",
			bad:     []chain.Policy{br(fiveConsecutive), rt(retry.MaxAttempts(3)), to(time.Second)},
			good:    []chain.Policy{rt(retry.MaxAttempts(3)), br(fiveConsecutive), to(time.Second)},
			numbers: []string{"1 failure per 3 downstream calls", "after 15 downstream calls instead of 5"},
		},
		{
			code:    "CG003",
			bad:     []chain.Policy{br(fiveConsecutive), to(100*time.Millisecond, timeout.Latency(0.8, 100*time.Millisecond), timeout.Latency(1, time.Second))},
			good:    []chain.Policy{br(fiveConsecutive), to(time.Second, timeout.Latency(0.8, 100*time.Millisecond), timeout.Latency(1, time.Second))},
			numbers: []string{"p80 latency of 100ms", "≥ 20% of calls"},
		},
		{
			code:    "CG016",
			bad:     []chain.Policy{hg(hedge.Settings{Delay: 50 * time.Millisecond}), rt(retry.MaxAttempts(3), budget()), br(fiveConsecutive), to(time.Second)},
			good:    []chain.Policy{rt(retry.MaxAttempts(3), budget()), hg(hedge.Settings{Delay: 50 * time.Millisecond}), br(fiveConsecutive), to(time.Second)},
			numbers: []string{"up to 2 × 3 = 6 downstream calls per request"},
		},
		{
			code:    "CG017",
			bad:     []chain.Policy{rt(retry.MaxAttempts(3), budget()), br(fiveConsecutive), hg(hedge.Settings{Delay: 50 * time.Millisecond, MaxHedges: 2, Budget: 0.1}), to(time.Second)},
			good:    []chain.Policy{rt(retry.MaxAttempts(3), budget()), hg(hedge.Settings{Delay: 50 * time.Millisecond, MaxHedges: 2, Budget: 0.1}), br(fiveConsecutive), to(time.Second)},
			numbers: []string{"one outcome for up to 3 attempts", "one probe becomes up to 3 calls"},
		},
		{
			code:    "CG018",
			bad:     []chain.Policy{rt(retry.MaxAttempts(3), budget()), hg(hedge.Settings{Delay: 50 * time.Millisecond}), br(fiveConsecutive), to(time.Second)},
			good:    []chain.Policy{rt(retry.MaxAttempts(3), budget()), br(fiveConsecutive), to(time.Second)},
			numbers: []string{"hedges every call"},
		},
		{
			code:    "CG019",
			bad:     []chain.Policy{rt(retry.MaxAttempts(3), budget()), hg(hedge.Settings{Delay: 10 * time.Millisecond}), br(fiveConsecutive), to(time.Second, timeout.Latency(0.5, 20*time.Millisecond), timeout.Latency(0.99, 200*time.Millisecond))},
			good:    []chain.Policy{rt(retry.MaxAttempts(3), budget()), hg(hedge.Settings{Delay: 60 * time.Millisecond}), br(fiveConsecutive), to(time.Second, timeout.Latency(0.5, 20*time.Millisecond), timeout.Latency(0.99, 200*time.Millisecond))},
			numbers: []string{"declared p50 of 20ms", "over 50% of healthy calls", "(5%)"},
		},
		{
			code:    "CG024",
			bad:     []chain.Policy{must(limit.New(limit.Settings{})), rt(retry.MaxAttempts(3), budget()), br(fiveConsecutive), to(time.Second)},
			good:    []chain.Policy{rt(retry.MaxAttempts(3), budget()), must(limit.New(limit.Settings{})), br(fiveConsecutive), to(time.Second)},
			numbers: []string{"ten times slower than an answer"},
		},
		{
			code:    "CG022",
			bad:     []chain.Policy{rt(retry.MaxAttempts(3), budget()), bh(limit.BulkheadSettings{MaxConcurrent: 10, MaxQueue: 20, MaxWait: time.Second}), br(fiveConsecutive), to(500 * time.Millisecond)},
			good:    []chain.Policy{rt(retry.MaxAttempts(3), budget()), bh(limit.BulkheadSettings{MaxConcurrent: 10, MaxQueue: 20, MaxWait: 50 * time.Millisecond}), br(fiveConsecutive), to(500 * time.Millisecond)},
			numbers: []string{"up to 1s for a slot", "the 500ms an attempt may run"},
		},
		{
			code:    "CG021",
			bad:     []chain.Policy{rt(retry.MaxAttempts(3), budget()), br(breaker.Settings{FailureRate: 0.5, Window: 10 * time.Second, MinCalls: 20}), th(), to(time.Second)},
			good:    []chain.Policy{rt(retry.MaxAttempts(3), budget()), th(), br(breaker.Settings{FailureRate: 0.5, Window: 10 * time.Second, MinCalls: 20}), to(time.Second)},
			numbers: []string{"(90% refused: 1 call in 10 reaches its rules)", "needs 200 calls to see its 20", "1m0s window"},
		},
		{
			code:    "CG023",
			bad:     []chain.Policy{rt(retry.MaxAttempts(3)), hg(hedge.Settings{Delay: 50 * time.Millisecond}), br(fiveConsecutive), to(time.Second)},
			good:    []chain.Policy{rt(retry.MaxAttempts(3), budget()), hg(hedge.Settings{Delay: 50 * time.Millisecond}), br(fiveConsecutive), to(time.Second)},
			numbers: []string{"caps its extra load at 5%", "up to 6 attempts per request"},
		},
		{
			code:    "CG015",
			bad:     []chain.Policy{rt(retry.MaxAttempts(3)), br(fiveConsecutive), to(300 * time.Millisecond)},
			good:    []chain.Policy{rt(retry.MaxAttempts(3)), br(fiveConsecutive), to(300*time.Millisecond, timeout.Latency(0.99, 120*time.Millisecond))},
			numbers: []string{"once it has run 150ms, half the timeout", "timeout.New(300ms, timeout.Latency(0.99, p99))"},
		},
		{
			code:    "CG004",
			bad:     []chain.Policy{br(fiveConsecutive), to(3 * time.Second)},
			good:    []chain.Policy{br(fiveConsecutive), to(200 * time.Millisecond)},
			numbers: []string{"5 × 3s = 15s at 1 caller"},
		},
		{
			// The run must last 20s: longer than 5 hung attempts take.
			code:    "CG004",
			bad:     []chain.Policy{br(breaker.Settings{ConsecutiveFailures: 5, ConsecutiveFor: 20 * time.Second}), to(200 * time.Millisecond)},
			good:    []chain.Policy{br(breaker.Settings{ConsecutiveFailures: 5, ConsecutiveFor: 500 * time.Millisecond}), to(200 * time.Millisecond)},
			numbers: []string{"over at least 20s", "detected only after 20s", "a shorter ConsecutiveFor"},
		},
		{
			// The callers' deadline cuts every hung attempt before it has run
			// the 5s (half the 10s timeout) that makes a cut attempt a failure.
			code:    "CG004",
			opts:    chain.Options{CallerDeadline: time.Second},
			bad:     []chain.Policy{rt(retry.MaxAttempts(5)), br(breaker.Settings{FailureRate: 0.5}), to(10 * time.Second)},
			good:    []chain.Policy{rt(retry.MaxAttempts(5)), br(breaker.Settings{FailureRate: 0.5}), to(500 * time.Millisecond)},
			numbers: []string{"once it has run 5s (half the timeout", "the callers' 1s deadline (Options.CallerDeadline) ends every hung attempt at 1s", "waits out its whole 1s", "4 of its 5 attempts never made", "an attempt timeout below 1s"},
		},
		{
			// The same with an overall timeout in the chain, and a cut that
			// comes after the patience: each hung attempt then counts at 4s.
			code:    "CG004",
			bad:     []chain.Policy{to(4 * time.Second), rt(retry.MaxAttempts(3)), br(fiveConsecutive), to(6*time.Second, timeout.Latency(0.99, 2*time.Second))},
			good:    []chain.Policy{to(4 * time.Second), rt(retry.MaxAttempts(3)), br(fiveConsecutive), to(time.Second, timeout.Latency(0.99, 200*time.Millisecond))},
			numbers: []string{"timeout(4s) outside it cuts each hung attempt at 4s", "past 2s, its declared p99", "5 × 4s = 20s at 1 caller"},
		},
		{
			code:    "CG004",
			bad:     []chain.Policy{to(time.Second), rt(retry.MaxAttempts(3)), br(fiveConsecutive), to(3 * time.Second)},
			good:    []chain.Policy{to(time.Second), rt(retry.MaxAttempts(3)), br(fiveConsecutive), to(300 * time.Millisecond)},
			numbers: []string{"timeout(1s) outside it ends every hung attempt at 1s", "once it has run 1.5s", "2 of its 3 attempts never made"},
		},
		{
			code:    "CG005",
			bad:     []chain.Policy{to(2 * time.Second), rt(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second)), br(fiveConsecutive), to(time.Second)},
			good:    []chain.Policy{to(4 * time.Second), rt(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second)), br(fiveConsecutive), to(time.Second)},
			numbers: []string{"3 × 1s, and 300ms of waits", "attempt 3 is never made", "end at 2.2s", "at least 3.3s"},
		},
		{
			// The chain the protection benchmark took from the docs: the last
			// attempt gets 250ms of its 300ms, above the 150ms a healthy
			// answer takes: no finding. With 150ms less, it would get 100ms.
			code:    "CG005",
			bad:     []chain.Policy{to(850 * time.Millisecond), rt(retry.MaxAttempts(3), retry.Exponential(50*time.Millisecond, time.Second)), br(fiveConsecutive), to(300 * time.Millisecond)},
			good:    []chain.Policy{to(time.Second), rt(retry.MaxAttempts(3), retry.Exponential(50*time.Millisecond, time.Second)), br(fiveConsecutive), to(300 * time.Millisecond)},
			numbers: []string{"attempt 3 starts at 750ms and gets only 100ms of its 300ms", "less than the 150ms", "at least 1.05s"},
		},
		{
			code:    "CG005",
			bad:     []chain.Policy{to(250 * time.Millisecond), rt(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second)), br(fiveConsecutive)},
			good:    []chain.Policy{to(350 * time.Millisecond), rt(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second)), br(fiveConsecutive)},
			numbers: []string{"even when every attempt fails at once, attempt 3 is never made", "(300ms)"},
		},
		{
			code:    "CG006",
			bad:     []chain.Policy{rt(retry.MaxAttempts(3)), rt(retry.MaxAttempts(4)), br(fiveConsecutive), to(time.Second)},
			good:    []chain.Policy{rt(retry.MaxAttempts(3)), br(fiveConsecutive), to(time.Second)},
			numbers: []string{"3 × 4 = 12 downstream calls"},
		},
		{
			code:    "CG007",
			bad:     []chain.Policy{br(breaker.Settings{ConsecutiveFailures: 5, HalfOpenProbes: 10}), to(time.Second)},
			good:    []chain.Policy{br(breaker.Settings{ConsecutiveFailures: 5, HalfOpenProbes: 10, HalfOpenSuccesses: 7}), to(time.Second)},
			numbers: []string{"10 of its 10", "probability 35%", "at 70% 2.8%"},
		},
		{
			code:    "CG008",
			bad:     []chain.Policy{br(fiveConsecutive), must(fallback.New(ok, fallback.OnAnyFailure())), to(time.Second)},
			good:    []chain.Policy{must(fallback.New(ok, fallback.OnAnyFailure())), br(fiveConsecutive), to(time.Second)},
			numbers: []string{"never opens"},
		},
		{
			code:    "CG008",
			bad:     []chain.Policy{to(2 * time.Second), must(fallback.New(ok, fallback.OnAnyFailure())), br(fiveConsecutive), to(time.Second)},
			good:    []chain.Policy{must(fallback.New(ok, fallback.OnAnyFailure())), to(2 * time.Second), br(fiveConsecutive), to(time.Second)},
			numbers: []string{"when the 2s are up it cannot answer"},
		},
		{
			code:    "CG009",
			bad:     []chain.Policy{to(time.Second), br(fiveConsecutive)},
			good:    []chain.Policy{br(fiveConsecutive), to(time.Second)},
			numbers: []string{"half-open probe slot"},
		},
		{
			code:    "CG010",
			bad:     []chain.Policy{br(breaker.Settings{FailureRate: 0.5, Window: time.Second}), to(800 * time.Millisecond)},
			good:    []chain.Policy{br(breaker.Settings{FailureRate: 0.5, Window: 10 * time.Second}), to(800 * time.Millisecond)},
			numbers: []string{"1s window", "800ms attempt timeout", "at least 1.6s"},
		},
		{
			code:    "CG027",
			bad:     []chain.Policy{rt(retry.MaxAttempts(3)), br(breaker.Settings{ConsecutiveFailures: 10, FailureRate: 0.5}), to(time.Second)},
			good:    []chain.Policy{rt(retry.MaxAttempts(3)), br(breaker.Settings{ConsecutiveFailures: 10, FailureRate: 0.79}), to(time.Second)},
			numbers: []string{"FailureRate 0.5 trips when 12.5% of the requests fail", "failing 60% of the calls", "78.4% of the requests would succeed", "FailureRate 0.79"},
		},
		{
			code:    "CG011",
			bad:     []chain.Policy{br(breaker.Settings{ConsecutiveFailures: 5, HalfOpenProbes: 8, HalfOpenSuccesses: 4}), to(time.Second)},
			good:    []chain.Policy{br(breaker.Settings{ConsecutiveFailures: 5, HalfOpenProbes: 3}), to(time.Second)},
			numbers: []string{"8 half-open probes", "sends up to 8 calls", "the round fails after 5"},
		},
		{
			code:    "CG012",
			opts:    chain.Options{DownstreamRecovery: 30 * time.Second},
			bad:     []chain.Policy{br(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 5 * time.Second}), to(time.Second)},
			good:    []chain.Policy{br(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 5 * time.Second, MaxOpenTimeout: time.Minute}), to(time.Second)},
			numbers: []string{"stays open 5s", "30s to recover", "about 5 times", "up to 3 probes"},
		},
		{
			code:    "CG012",
			opts:    chain.Options{DownstreamRecovery: 30 * time.Second},
			bad:     []chain.Policy{br(breaker.Settings{WindowCalls: 50, FailureRate: 0.1, SkipHalfOpen: true, OpenTimeout: time.Second}), to(time.Second)},
			good:    []chain.Policy{br(breaker.Settings{WindowCalls: 50, FailureRate: 0.1, SkipHalfOpen: true, OpenTimeout: time.Second, MaxOpenTimeout: 30 * time.Second}), to(time.Second)},
			numbers: []string{"stays open 1s", "open → closed → open about 29 times"},
		},
		{
			code:    "CG002",
			bad:     []chain.Policy{br(fiveConsecutive), rt(retry.MaxAttempts(3), retry.WithBudget(must(retry.NewBudget(0.1, 0)))), to(time.Second)},
			good:    []chain.Policy{rt(retry.MaxAttempts(3), retry.WithBudget(must(retry.NewBudget(0.1, 0)))), br(fiveConsecutive), to(time.Second)},
			numbers: []string{"after up to 15 downstream calls instead of 5", "starting 10 tokens", "at 10% of calls", "≈ 1.10× the load, not 3×"},
		},
		{
			code:    "CG014",
			bad:     []chain.Policy{to(time.Second), rt(retry.MaxAttempts(3)), br(fiveConsecutive), to(300*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{}))},
			good:    []chain.Policy{to(time.Second), rt(retry.MaxAttempts(3)), br(fiveConsecutive), to(300*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{Max: 400 * time.Millisecond}))},
			numbers: []string{"grow up to 3s", "not below the 1s", "after the whole 1s", "Max below 1s"},
		},
	} {
		t.Run(tc.code, func(t *testing.T) {
			bad, err := tc.opts.New(tc.bad...)
			if err != nil {
				t.Fatal(err)
			}
			var msg string
			var sev chain.Severity
			for _, f := range bad.Findings() {
				if f.Code == tc.code {
					msg, sev = f.Message, f.Severity
				}
			}
			if msg == "" {
				t.Fatalf("%v: findings %v, want %s", bad, codes(bad.Findings()), tc.code)
			}
			for _, n := range tc.numbers {
				if !strings.Contains(msg, n) {
					t.Errorf("%s message lacks %q:\n%s", tc.code, n, msg)
				}
			}
			if !strings.Contains(msg, "Fix:") {
				t.Errorf("%s message has no fix:\n%s", tc.code, msg)
			}
			good, err := tc.opts.New(tc.good...)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(codes(good.Findings()), tc.code) {
				t.Errorf("%v: findings %v, want no %s", good, codes(good.Findings()), tc.code)
			}
			// Strict mode refuses the bad chain, naming the code.
			strict := tc.opts
			strict.Strict = true
			if _, err := strict.New(tc.bad...); sev == chain.SeverityInfo {
				if err != nil && strings.Contains(err.Error(), tc.code) {
					t.Errorf("strict: %v; an info finding never blocks", err)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.code) {
				t.Errorf("strict: %v, want an error naming %s", err, tc.code)
			}
			strict.Ignore = codes(bad.Findings())
			if _, err := strict.New(tc.bad...); err != nil {
				t.Errorf("strict with every code ignored: %v", err)
			}
		})
	}
	if got := len(chain.Rules()); got != 27 {
		t.Errorf("%d rules documented, want 27", got)
	}
}

// policyFunc is a user's policy written as a function.
type policyFunc func(context.Context, func(context.Context) error) error

func (f policyFunc) Do(ctx context.Context, call func(context.Context) error) error {
	return f(ctx, call)
}

func TestNilPolicy(t *testing.T) {
	var b *breaker.Breaker
	var f policyFunc
	for _, tc := range []struct {
		ps   []chain.Policy
		name string
	}{{[]chain.Policy{nil}, "policy #1 (index 0) is nil"}, {[]chain.Policy{rt(), b}, "policy #2 (index 1) is nil"}, {[]chain.Policy{f}, "policy #1 (index 0) is nil"}} {
		if c, err := chain.New(tc.ps...); c != nil || err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("New(%v) = %v, %v; want an error saying %q", tc.ps, c, err, tc.name)
		}
	}
}

// TestNilChain: a nil *Chain and a zero Chain run calls directly, and
// every method accepts them (Findings and String panicked on nil).
func TestNilChain(t *testing.T) {
	for _, c := range []*chain.Chain{nil, {}, must(chain.New())} {
		calls := 0
		err := c.Do(context.Background(), func(context.Context) error { calls++; return nil })
		if err != nil || calls != 1 || c.String() != "(empty chain)" || len(c.Findings()) != 0 || len(c.Policies()) != 0 {
			t.Errorf("%#v: Do %v after %d calls, String %q, Findings %v, Policies %v", c, err, calls, c.String(), c.Findings(), c.Policies())
		}
	}
}

// TestZeroPolicies: a callguard policy not made by its package's New is
// refused by name, not left to fail at run time; a zero fallback passes
// through, as documented.
func TestZeroPolicies(t *testing.T) {
	for _, p := range []chain.Policy{&retry.Policy{}, &timeout.Policy{}, &breaker.Breaker{}} {
		c, err := chain.New(rt(), p)
		if c != nil || err == nil || !strings.Contains(err.Error(), fmt.Sprintf("zero %T", p)) {
			t.Errorf("New(retry, zero %T) = %v, %v; want an error naming it", p, c, err)
		}
	}
	if _, err := chain.New(rt(), &fallback.Policy{}); err != nil {
		t.Errorf("zero fallback refused: %v", err)
	}
	gb := must(breaker.FromGobreaker(gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{})))
	if _, err := chain.New(rt(), gb); err != nil {
		t.Errorf("an adapted gobreaker refused: %v", err)
	}
}

// finding returns the message of the finding with code, if any.
func finding(c *chain.Chain, code string) (string, bool) {
	for _, f := range c.Findings() {
		if f.Code == code {
			return f.Message, true
		}
	}
	return "", false
}

// TestLintHugeSettings: products and sums over huge but valid settings stop
// at the largest duration instead of wrapping around, so the rules still
// fire with sensible numbers.
func TestLintHugeSettings(t *testing.T) {
	huge := time.Duration(math.MaxInt64 / 2)
	for _, tc := range []struct {
		code     string
		policies []chain.Policy
	}{
		{"CG004", []chain.Policy{br(breaker.Settings{ConsecutiveFailures: 5}), to(huge)}},
		{"CG005", []chain.Policy{to(time.Hour), rt(retry.MaxAttempts(2), retry.Constant(0)), br(fiveConsecutive), to(huge + time.Hour)}},
		{"CG005", []chain.Policy{to(time.Hour), rt(retry.MaxAttempts(retry.MaxAttemptsLimit)), br(fiveConsecutive), to(time.Duration(math.MaxInt64 / 1000))}},
		{"CG001", []chain.Policy{rt(retry.MaxAttempts(100), retry.Exponential(time.Second, time.Duration(math.MaxInt64/4)), retry.RetryWhenOpen()), br(fiveConsecutive), to(time.Second)}},
	} {
		c := must(chain.New(tc.policies...))
		m, ok := finding(c, tc.code)
		if !ok || strings.Contains(m, "≈ -") || strings.Contains(m, "= -") {
			t.Errorf("%s on %v: %q, %t; want it, with no negative duration", tc.code, c, m, ok)
		}
		if len(m) > 2000 {
			t.Errorf("%s on %v: a %d-byte message", tc.code, c, len(m))
		}
	}
}

// TestLintAdaptedGobreaker: a breaker adapted from gobreaker, whose settings
// are unknown, still gets the rules of order.
func TestLintAdaptedGobreaker(t *testing.T) {
	gb := must(breaker.FromGobreaker(gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{})))
	c := must(chain.New(gb, rt(retry.MaxAttempts(3)), to(time.Second)))
	if _, ok := finding(c, "CG002"); !ok {
		t.Errorf("%v: no CG002 for a retry inside the breaker", c)
	}
	c = must(chain.New(rt(retry.MaxAttempts(3), retry.RetryWhenOpen()), gb))
	for _, code := range []string{"CG001", "CG009"} {
		if _, ok := finding(c, code); !ok {
			t.Errorf("%v: no %s", c, code)
		}
	}
}

// TestLintCG012GrowingStay: with a stay that doubles up to MaxOpenTimeout,
// the breaker goes half-open at 5, 15, 25, 35, 45 and 55 s of a 60 s
// recovery: 6 rounds.
func TestLintCG012GrowingStay(t *testing.T) {
	c := must(chain.Options{DownstreamRecovery: time.Minute}.New(br(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 5 * time.Second, MaxOpenTimeout: 10 * time.Second}), to(time.Second)))
	if m, _ := finding(c, "CG012"); !strings.Contains(m, "about 6 times") {
		t.Errorf("CG012: %q; want about 6 times", m)
	}
}

// TestOptionsInvalid: negative durations in Options are refused by name.
func TestOptionsInvalid(t *testing.T) {
	for name, o := range map[string]chain.Options{
		"MaxDetection":       {MaxDetection: -1},
		"DownstreamRecovery": {DownstreamRecovery: -time.Second},
		"CallerDeadline":     {CallerDeadline: -time.Second},
	} {
		if c, err := o.New(rt(), br(fiveConsecutive), to(time.Second)); c != nil || err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s < 0: %v, %v; want an error naming it", name, c, err)
		}
	}
}

// TestCG021PerRule: the numbers of a throttle inside a breaker are those of
// the breaker's own trip rules, at the throttle's cap (90 % refused: 1 call
// in 10 reaches the breaker's rules), and no rule the breaker lacks is
// named.
func TestCG021PerRule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		s       breaker.Settings
		adapted bool // a gobreaker through breaker.FromGobreaker, s unused
		numbers []string
		absent  []string
	}{
		{
			name:    "consecutive",
			s:       breaker.Settings{ConsecutiveFailures: 5},
			numbers: []string{"(90% refused: 1 call in 10 reaches its rules)", "its 5 consecutive failures take 50 calls to arrive", "stays half-open"},
			absent:  []string{"rate", "window needs"},
		},
		{
			name:    "rate-window",
			s:       breaker.Settings{FailureRate: 0.5, Window: 10 * time.Second, MinCalls: 20},
			numbers: []string{"its failure-rate window (10s) needs 200 calls to see its 20 (MinCalls)"},
			absent:  []string{"consecutive", "slow"},
		},
		{
			name:    "count-window",
			s:       breaker.Settings{FailureRate: 0.5, WindowCalls: 50, MinCalls: 20},
			numbers: []string{"its failure-rate window of the last 50 calls spans 500 calls, and needs 200 to see its 20 (MinCalls)"},
			absent:  []string{"consecutive", "slow"},
		},
		{
			name:    "count-window-full",
			s:       breaker.Settings{FailureRate: 0.5, WindowCalls: 50},
			numbers: []string{"its failure-rate window of the last 50 calls spans 500 calls, all needed before it can trip"},
			absent:  []string{"consecutive", "slow"},
		},
		{
			name:    "slow-calls",
			s:       breaker.Settings{SlowCall: 200 * time.Millisecond, SlowCallRate: 0.5, Window: 10 * time.Second, MinCalls: 20},
			numbers: []string{"its slow-call-rate window (10s) needs 200 calls to see its 20 (MinCalls)"},
			absent:  []string{"consecutive", "failure-rate"},
		},
		{
			name:    "default",
			s:       breaker.Settings{},
			numbers: []string{"its 10 consecutive failures take 100 calls to arrive", "its failure-rate window (10s) needs 200 calls to see its 20 (MinCalls)"},
			absent:  []string{"slow"},
		},
		{
			name:    "no-half-open",
			s:       breaker.Settings{ConsecutiveFailures: 5, SkipHalfOpen: true},
			numbers: []string{"its 5 consecutive failures take 50 calls to arrive", "closes at the end of each open stay"},
			absent:  []string{"probe"},
		},
		{
			name:    "from-gobreaker",
			adapted: true,
			numbers: []string{"its trip rules (an adapted gobreaker's, unknown to the lint) see 1 outcome per 10 calls", "stays half-open"},
			absent:  []string{"consecutive", "rate"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := br(tc.s)
			if tc.adapted {
				b = must(breaker.FromGobreaker(gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{})))
			}
			c, err := chain.New(b, th(), to(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var msg string
			for _, f := range c.Findings() {
				if f.Code == "CG021" {
					msg = f.Message
				}
			}
			if msg == "" {
				t.Fatalf("%v: findings %v, want CG021", c, codes(c.Findings()))
			}
			for _, n := range tc.numbers {
				if !strings.Contains(msg, n) {
					t.Errorf("message lacks %q:\n%s", n, msg)
				}
			}
			for _, n := range tc.absent {
				if strings.Contains(msg, n) {
					t.Errorf("message names %q, a rule the breaker lacks:\n%s", n, msg)
				}
			}
		})
	}
}
