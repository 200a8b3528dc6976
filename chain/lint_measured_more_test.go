package chain_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// The rules rewritten or added after lint_measured_test.go: CG002 with a
// retry budget, CG005, CG012 without half-open, CG013, CG014 and CG015, each
// compared with a virtual-time run of its chain, as there.

// TestMeasuredCG002Budget: with a retry budget, the breaker around the
// retry opens after the printed number of downstream calls (from a fresh
// budget), and in a long outage the budget holds the load to the printed
// factor.
func TestMeasuredCG002Budget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := must(retry.NewBudget(0.1, 0))
		r := rt(retry.MaxAttempts(3), retry.Constant(0), retry.WithBudget(budget))
		b := br(fiveConsecutive)
		c := must(chain.New(b, r, to(time.Second)))
		claim, _ := lintClaim(t, c, "CG002")
		calls := count(t, claim, "downstream calls instead of")
		factor := atof(t, match(t, `≈ (\d+\.\d+)× the load`, claim)[1])
		var got int
		call := func(context.Context) error { got++; return errDown }
		for b.State() == breaker.StateClosed {
			_ = c.Do(context.Background(), call)
		}
		check(t, "downstream calls before the breaker opened", got, calls, "")
		// A long outage with the breaker out of reach: what the budget lets
		// through per request once its starting tokens are spent.
		loose := must(chain.New(r))
		got = 0
		const requests = 2000
		for range requests {
			_ = loose.Do(context.Background(), call)
		}
		if load := float64(got) / requests; load < factor-0.01 || load > factor+0.01 {
			t.Errorf("load per request in a long outage: got %.3f, want %.2f ± 0.01", load, factor)
		}
	})
}

// TestMeasuredCG005: against a hung downstream, the printed attempt starts
// when printed and gets what is printed, or is never made; with failures at
// once, the waits alone leave the printed attempt out.
func TestMeasuredCG005(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policies []chain.Policy
		down     func(context.Context) error
	}{
		{"cut short", []chain.Policy{to(850 * time.Millisecond), rt(retry.MaxAttempts(3), retry.Exponential(50*time.Millisecond, time.Second), retry.Jitter(0)), br(fiveConsecutive), to(300 * time.Millisecond)}, hung},
		{"never made", []chain.Policy{to(2 * time.Second), rt(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second), retry.Jitter(0)), br(fiveConsecutive), to(time.Second)}, hung},
		{"waits alone", []chain.Policy{to(250 * time.Millisecond), rt(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second), retry.Jitter(0)), br(fiveConsecutive)}, failing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := must(chain.New(tc.policies...))
				claim, _ := lintClaim(t, c, "CG005")
				var starts, lasted []time.Duration
				begin := time.Now()
				_ = c.Do(context.Background(), func(ctx context.Context) error {
					s := time.Now()
					starts = append(starts, s.Sub(begin))
					err := tc.down(ctx)
					lasted = append(lasted, time.Since(s))
					return err
				})
				k := atoi(t, match(t, `attempt (\d+)`, claim)[1])
				if m := match(t, `attempt \d+ (starts at|is never made)`, claim); m[1] == "is never made" {
					check(t, "attempts made", len(starts), k-1, "")
					return
				}
				ds := durations(t, match(t, `starts at (`+durPat+`) and gets only (`+durPat+`)`, claim)[0])
				if len(starts) < k {
					t.Fatalf("got %d attempts, want at least %d", len(starts), k)
				}
				check(t, "start of the printed attempt", starts[k-1], ds[0], "")
				check(t, "time the printed attempt got", lasted[k-1], ds[1], "")
			})
		})
	}
}

// TestMeasuredCG012SkipHalfOpen: without half-open, a breaker whose stay is
// shorter than the downstream's recovery goes open → closed → open about
// the printed number of times while the downstream is down.
func TestMeasuredCG012SkipHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tr transitions
		b := br(breaker.Settings{WindowCalls: 50, FailureRate: 0.1, SkipHalfOpen: true, OpenTimeout: time.Second, OnStateChange: tr.record})
		c := must(chain.Options{DownstreamRecovery: 30 * time.Second}.New(b, to(time.Second)))
		claim, _ := lintClaim(t, c, "CG012")
		want := count(t, claim, "times")
		recovery := durations(t, claim)[1]
		start := time.Now()
		for time.Since(start) < recovery {
			if err := c.Do(context.Background(), failing); errors.Is(err, breaker.ErrOpen) {
				time.Sleep(10 * time.Millisecond)
			}
		}
		opens := 0
		for _, to := range tr.to {
			if to == breaker.StateOpen {
				opens++
			}
		}
		if got := opens - 1; got < want-1 || got > want {
			t.Errorf("open → closed → open while down: got %d, want about %d", got, want)
		}
	})
}

// TestMeasuredCG013: once the budget's starting tokens are spent, the
// printed number of failing calls per request reaches the breaker, and it
// opens after the printed number of requests; without the budget, after
// the other printed number.
func TestMeasuredCG013(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		newChain := func(withBudget bool) (*chain.Chain, *breaker.Breaker, *retry.Budget) {
			opts := []retry.Option{retry.MaxAttempts(3), retry.Constant(0)}
			var budget *retry.Budget
			if withBudget {
				budget = must(retry.NewBudget(0.1, 0))
				opts = append(opts, retry.WithBudget(budget))
			}
			b := br(fiveConsecutive)
			return must(chain.New(rt(opts...), b, to(time.Second))), b, budget
		}
		c, b, budget := newChain(true)
		var info chain.Finding
		for _, f := range c.Findings() {
			if f.Code == "CG013" {
				info = f
			}
		}
		if info.Severity != chain.SeverityInfo {
			t.Fatalf("CG013 finding %+v, want severity info", info)
		}
		claim, _ := lintClaim(t, c, "CG013")
		m := match(t, `after (\d+)(?: to (\d+))? failing requests instead of (\d+)`, claim)
		least, most, without := atoi(t, m[1]), atoi(t, m[1]), atoi(t, m[3])
		if m[2] != "" {
			most = atoi(t, m[2])
		}
		perRequest := atof(t, match(t, `(\d+\.\d+) failing calls per request`, claim)[1])
		// Spend the starting tokens, through another retry on the same
		// budget, until a retry is refused.
		spender := must(chain.New(rt(retry.MaxAttempts(2), retry.Constant(0), retry.WithBudget(budget))))
		for refused := false; !refused; {
			calls := 0
			_ = spender.Do(context.Background(), func(context.Context) error { calls++; return errDown })
			refused = calls == 1
		}
		requests := 0
		for b.State() == breaker.StateClosed {
			requests++
			_ = c.Do(context.Background(), failing)
		}
		if requests < least || requests > most {
			t.Errorf("failing requests until the breaker opened, budget spent: got %d, want %d to %d", requests, least, most)
		}
		c2, b2, _ := newChain(false)
		requests = 0
		for b2.State() == breaker.StateClosed {
			requests++
			_ = c2.Do(context.Background(), failing)
		}
		check(t, "failing requests until the breaker opened, no budget", requests, without, "")
		// Failing calls per request with the budget spent, over a long run.
		loose := must(chain.New(rt(retry.MaxAttempts(3), retry.Constant(0), retry.WithBudget(must(retry.NewBudget(0.1, 0))))))
		calls := 0
		for range 2000 {
			_ = loose.Do(context.Background(), func(context.Context) error { calls++; return errDown })
		}
		if got := float64(calls-10) / 2000; got < perRequest-0.01 || got > perRequest+0.01 {
			t.Errorf("failing calls per request past the starting tokens: got %.3f, want %.2f", got, perRequest)
		}
	})
}

// TestMeasuredCG014: an adaptive attempt timeout that has grown past the
// overall timeout lets the overall deadline end the attempt, after the
// printed time, with no further attempt.
func TestMeasuredCG014(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		grown := to(2*time.Second, timeout.Adaptive(timeout.AdaptiveOptions{})) // as after slow answers
		c := must(chain.New(to(time.Second), rt(retry.MaxAttempts(3), retry.Constant(0)), br(fiveConsecutive), grown))
		claim, _ := lintClaim(t, c, "CG014")
		whole := durations(t, match(t, `after the whole (`+durPat+`)`, claim)[0])[0]
		attempts := 0
		start := time.Now()
		err := c.Do(context.Background(), func(ctx context.Context) error { attempts++; return hung(ctx) })
		check(t, "time the attempt ran", time.Since(start), whole, "")
		check(t, "attempts", attempts, 1, "")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want the overall deadline", err)
		}
	})
}

// TestMeasuredCG015: an attempt that a caller's deadline cuts counts as a
// failure of the downstream once it has run the printed time (half the
// timeout, with no tail declared), and as the caller's own before it.
func TestMeasuredCG015(t *testing.T) {
	c0 := must(chain.New(rt(retry.MaxAttempts(3)), br(fiveConsecutive), to(300*time.Millisecond)))
	claim, _ := lintClaim(t, c0, "CG015")
	patience := durations(t, match(t, `once it has run (`+durPat+`)`, claim)[0])[0]
	for _, tc := range []struct {
		deadline time.Duration
		failure  bool
	}{{patience - time.Millisecond, false}, {patience + time.Millisecond, true}} {
		synctest.Test(t, func(t *testing.T) {
			b := br(fiveConsecutive)
			c := must(chain.New(rt(retry.MaxAttempts(3)), b, to(300*time.Millisecond)))
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			_ = c.Do(ctx, hung)
			cn := b.Counts()
			if got := cn.Failures == 1; got != tc.failure || cn.Failures+cn.Neutral != 1 {
				t.Errorf("caller's deadline %v: breaker counts %+v; want the attempt counted a failure: %t", tc.deadline, cn, tc.failure)
			}
		})
	}
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	var f float64
	if _, err := fmt.Sscan(s, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestMeasuredCG027: a downstream failing the printed share of the calls,
// each independently, through a retry of 3 around a breaker rating
// attempts at 50 %: the breaker opens on it, and fewer requests succeed
// than the printed share that the retry alone gets; at the fix's rate
// the breaker stays closed and the requests succeed at that share.
func TestMeasuredCG027(t *testing.T) {
	lintOf := must(chain.New(rt(retry.MaxAttempts(3)), br(breaker.Settings{FailureRate: 0.5}), to(time.Second)))
	claim, fix := lintClaim(t, lintOf, "CG027")
	failing := atof(t, match(t, `failing (\d+)% of the calls`, claim)[1]) / 100
	succeed := atof(t, match(t, `(\d+\.\d)% of the requests would succeed`, claim)[1]) / 100
	rate := atof(t, match(t, `FailureRate (\d\.\d+)`, fix)[1])
	run := func(rate float64) (share float64, opened int) {
		synctest.Test(t, func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(27, 0))
			b := br(breaker.Settings{FailureRate: rate, OpenTimeout: time.Second, HalfOpenSuccesses: 2,
				OnStateChange: func(_, to breaker.State) {
					if to == breaker.StateOpen {
						opened++
					}
				}})
			c := must(chain.New(rt(retry.MaxAttempts(3), retry.Constant(0)), b, to(time.Second)))
			const requests = 3000
			ok := 0
			for range requests {
				if c.Do(context.Background(), func(context.Context) error {
					if rnd.Float64() < failing {
						return errDown
					}
					return nil
				}) == nil {
					ok++
				}
				time.Sleep(10 * time.Millisecond) // 100 requests a second, for 30 s
			}
			share = float64(ok) / requests
		})
		return share, opened
	}
	share, opened := run(0.5)
	if opened == 0 || share > succeed-0.1 {
		t.Errorf("FailureRate 0.5, the downstream failing %.0f%% of the calls: opened %d times, %.1f%% of the requests succeeded; want it opened and well under %.1f%%", 100*failing, opened, 100*share, 100*succeed)
	}
	t.Logf("FailureRate 0.5: %.1f%% of the requests succeeded, the breaker opened %d times", 100*share, opened)
	share, opened = run(rate)
	t.Logf("FailureRate %g: %.1f%% succeeded, opened %d times", rate, 100*share, opened)
	if opened != 0 || math.Abs(share-succeed) > 0.03 {
		t.Errorf("FailureRate %g (the fix): opened %d times, %.1f%% of the requests succeeded; want it closed, and %.1f%% ± 3", rate, opened, 100*share, 100*succeed)
	}
	if lintFixed := must(chain.New(rt(retry.MaxAttempts(3)), br(breaker.Settings{FailureRate: rate}), to(time.Second))); slices.Contains(codes(lintFixed.Findings()), "CG027") {
		t.Errorf("the fix still draws CG027: %v", lintFixed.Findings())
	}
}
