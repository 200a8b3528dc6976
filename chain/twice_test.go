package chain_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/internal/deferred"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"github.com/sony/gobreaker/v2"
)

// findingsIn returns the findings an error of New is made of.
func findingsIn(err error) []chain.Finding {
	var out []chain.Finding
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var f chain.Finding
		if errors.As(err, &f) {
			out = append(out, f)
		}
	}
	walk(err)
	return out
}

// TestSamePolicyTwice: a policy whose state counts calls, twice in one
// chain, is an error of New (CG025) that says what would happen in
// numbers; a policy with no such state (a fixed timeout) may be given
// twice.
func TestSamePolicyTwice(t *testing.T) {
	four := br(breaker.Settings{ConsecutiveFailures: 4})
	rate := br(breaker.Settings{FailureRate: 0.5, MinCalls: 20, HalfOpenProbes: 1})
	adapted := must(breaker.FromGobreaker(gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{})))
	thr := th()
	lim := must(limit.New(limit.Settings{}))
	bulk := bh(limit.BulkheadSettings{MaxConcurrent: 10})
	hed := hg(hedge.Settings{Delay: 50 * time.Millisecond})
	budgeted := rt(retry.MaxAttempts(3), budget())
	adaptive := to(300*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{}))
	fixed := to(time.Second)
	for _, tc := range []struct {
		name     string
		policies []chain.Policy
		numbers  []string // in the CG025 message; none: no CG025
	}{
		{"breaker", []chain.Policy{four, four, fixed}, []string{"policies #1 and #2", "a failure counted twice: ConsecutiveFailures 4 opens after 2 failing calls"}},
		{"breaker-apart", []chain.Policy{four, rt(retry.MaxAttempts(2)), four, fixed}, []string{"policies #1 and #3", "ConsecutiveFailures 4 opens after 2 failing calls"}},
		{"breaker-rate", []chain.Policy{rate, rate, fixed}, []string{"MinCalls 20 is reached after 10 calls", "its only half-open probe slot", "never closes"}},
		{"breaker-nested", []chain.Policy{four, must(chain.New(four, fixed))}, []string{"policies #1 and #2 (in a nested chain)", "ConsecutiveFailures 4 opens after 2 failing calls"}},
		{"breaker-adapted", []chain.Policy{adapted, adapted, fixed}, []string{"each outcome counted twice"}},
		{"throttle", []chain.Policy{thr, four, thr, fixed}, []string{"policies #1 and #3", "at its cap (90% refused) 99% of calls are"}},
		{"limiter", []chain.Policy{rt(retry.MaxAttempts(3), budget()), lim, lim, four, fixed}, []string{"each call takes 2 of its slots: at its limit of 20 (to start) it is full with 10 calls"}},
		{"bulkhead", []chain.Policy{bulk, four, bulk, fixed}, []string{"each call takes 2 of its 10 slots: it is full with 5 calls"}},
		{"hedge", []chain.Policy{budgeted, hed, hed, four, fixed}, []string{"up to 2 × 2 = 4 attempts per call", "its 5% budget"}},
		{"retry-budget", []chain.Policy{budgeted, budgeted, four, fixed}, []string{"up to 3 × 3 = 9 attempts per request", "credited twice per request"}},
		{"adaptive-timeout", []chain.Policy{four, adaptive, adaptive}, []string{"records each call twice"}},
		{"fixed-timeout", []chain.Policy{fixed, rt(retry.MaxAttempts(3), budget()), four, fixed}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := chain.New(tc.policies...)
			var msg string
			for _, f := range findingsIn(err) {
				if f.Code == "CG025" {
					if f.Severity != chain.SeverityError {
						t.Errorf("CG025 of severity %v, want error", f.Severity)
					}
					msg = f.Message
				}
			}
			if tc.numbers == nil {
				if msg != "" {
					t.Errorf("New: %v; want no CG025", err)
				}
				return
			}
			if c != nil || msg == "" {
				t.Fatalf("New: %v, %v; want no chain and a CG025 error", c, err)
			}
			for _, n := range tc.numbers {
				if !strings.Contains(msg, n) {
					t.Errorf("CG025 message lacks %q:\n%s", n, msg)
				}
			}
			if !strings.Contains(msg, "Fix:") {
				t.Errorf("CG025 message has no fix:\n%s", msg)
			}
		})
	}
}

// TestSameBreakerTwiceCountsTwice: what CG025 says of a breaker given
// twice, measured (the rule ignored): ConsecutiveFailures 4 opens after 2
// failing calls; with 3 half-open probes, all needed, successful calls
// never close it (the second takes the last slot at the outer place and is
// refused at the inner); with 4, 2 successful calls close it.
func TestSameBreakerTwiceCountsTwice(t *testing.T) {
	for _, tc := range []struct {
		name       string
		probes     int
		wantClosed int // successful calls after the stay that close it (0: none of 10)
	}{
		{"3-probes", 3, 0},
		{"4-probes", 4, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := br(breaker.Settings{ConsecutiveFailures: 4, OpenTimeout: time.Second, HalfOpenProbes: tc.probes})
				c, err := chain.Options{Ignore: []string{"CG025", "CG026"}}.New(b, b, to(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				calls := 0
				for b.State() == breaker.StateClosed && calls < 10 {
					calls++
					_ = c.Do(context.Background(), func(context.Context) error { return errors.New("down") })
				}
				if calls != 2 {
					t.Errorf("the breaker opened after %d failing calls, want 2 (as CG025 says)", calls)
				}
				time.Sleep(1100 * time.Millisecond)
				closedAfter := 0
				for k := 1; k <= 10 && closedAfter == 0; k++ {
					_ = c.Do(context.Background(), func(context.Context) error { return nil })
					if b.State() == breaker.StateClosed {
						closedAfter = k
					}
					if b.State() == breaker.StateOpen {
						time.Sleep(1100 * time.Millisecond) // the next round
					}
				}
				if closedAfter != tc.wantClosed {
					t.Errorf("closed after %d successful calls (0: never, in 10), want %d", closedAfter, tc.wantClosed)
				}
			})
		})
	}
}

// TestTwoBreakers: two different breakers in one chain are an info
// (CG026), never an error, also in strict mode: a breaker shared by many
// chains around one of each chain's own is a design; the finding says
// which opens first, after how many failing calls, as measured.
func TestTwoBreakers(t *testing.T) {
	for _, tc := range []struct {
		name         string
		outer, inner breaker.Settings
		numbers      []string
		// failing calls after which each opens, measured (0: not measured;
		// -1: stays closed in 20)
		outerOpens, innerOpens int
	}{
		{"inner-first", breaker.Settings{ConsecutiveFailures: 10}, breaker.Settings{ConsecutiveFailures: 5},
			[]string{"the inner opens after 5 failing calls", "its rejections (breaker.ErrOpen) count as failures to the outer, which opens 5 calls later, after 10 as alone", "closes only once a probe gets through the inner"},
			10, 5},
		{"outer-first", breaker.Settings{ConsecutiveFailures: 3}, breaker.Settings{ConsecutiveFailures: 5},
			[]string{"the outer opens first, after 3 failing calls, with 3 of the inner's 5 counted", "the inner sees only what the outer admits"},
			3, -1},
		{"rates", breaker.Settings{FailureRate: 0.5}, breaker.Settings{FailureRate: 0.2},
			[]string{"the inner sees every attempt the outer admits", "its rejections (breaker.ErrOpen) count as failures to the outer"},
			0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outer, inner := br(tc.outer), br(tc.inner)
			c, err := chain.Options{Strict: true}.New(outer, inner, to(time.Second, timeout.Latency(0.99, 100*time.Millisecond)))
			if err != nil {
				t.Fatalf("strict: %v; an info never blocks", err)
			}
			var msg string
			for _, f := range c.Findings() {
				if f.Code == "CG026" {
					if f.Severity != chain.SeverityInfo {
						t.Errorf("CG026 of severity %v, want info", f.Severity)
					}
					msg = f.Message
				}
			}
			if msg == "" {
				t.Fatalf("findings %v, want CG026", codes(c.Findings()))
			}
			for _, n := range tc.numbers {
				if !strings.Contains(msg, n) {
					t.Errorf("CG026 message lacks %q:\n%s", n, msg)
				}
			}
			if tc.outerOpens == 0 {
				return
			}
			outerOpens, innerOpens := -1, -1
			for k := 1; k <= 20; k++ {
				_ = c.Do(context.Background(), func(context.Context) error { return errors.New("down") })
				if outerOpens < 0 && outer.State() == breaker.StateOpen {
					outerOpens = k
				}
				if innerOpens < 0 && inner.State() == breaker.StateOpen {
					innerOpens = k
				}
			}
			if outerOpens != tc.outerOpens || innerOpens != tc.innerOpens {
				t.Errorf("the outer opened after %d failing calls, the inner after %d (-1: never); want %d and %d", outerOpens, innerOpens, tc.outerOpens, tc.innerOpens)
			}
		})
	}
}

// TestDoNilCall: a nil call (or a nil context) is an error of every entry
// point, ErrNilCall, never a nil dereference.
func TestDoNilCall(t *testing.T) {
	full := must(chain.New(rt(retry.MaxAttempts(2)), br(fiveConsecutive), to(time.Second)))
	for _, tc := range []struct {
		name string
		do   func(*chain.Chain, context.Context, func(context.Context) error) error
	}{
		{"Do", (*chain.Chain).Do},
		{"ChainDoHolding", func(c *chain.Chain, ctx context.Context, call func(context.Context) error) error {
			return bridge.ChainDoHolding(c, ctx, call)
		}},
		{"ChainDoDeferred", func(c *chain.Chain, ctx context.Context, call func(context.Context) error) error {
			return bridge.ChainDoDeferred(c, ctx, new(deferred.Set), call)
		}},
	} {
		for _, cc := range []struct {
			name string
			c    *chain.Chain
		}{{"chain", full}, {"empty", &chain.Chain{}}, {"nil", nil}} {
			t.Run(tc.name+"/"+cc.name, func(t *testing.T) {
				if err := tc.do(cc.c, context.Background(), nil); !errors.Is(err, chain.ErrNilCall) {
					t.Errorf("nil call: %v, want chain.ErrNilCall", err)
				}
				var none context.Context // a nil context is what is tested
				if err := tc.do(cc.c, none, func(context.Context) error { return nil }); !errors.Is(err, chain.ErrNilCall) {
					t.Errorf("nil context: %v, want chain.ErrNilCall", err)
				}
			})
		}
	}
}
