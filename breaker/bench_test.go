package breaker_test

import (
	"context"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/sony/gobreaker/v2"
)

// BenchmarkSuccess measures the success path in closed for callguard's
// native engine (Do and the two-step Allow/Done), callguard on the
// gobreaker engine, and raw gobreaker/v2 (Execute and two-step), in one run
// and under the same trip rules. Compare the columns with
//
//	go test ./breaker -run '^$' -bench Success -count 8 > bench.txt
//	benchstat -col /impl bench.txt
func BenchmarkSuccess(b *testing.B) {
	ctx := context.Background()
	call := func(context.Context) error { return nil }
	exec := func() (any, error) { return nil, nil }

	type impl struct {
		name string
		op   func()
	}
	run := func(b *testing.B, impls []impl) {
		for _, mode := range []string{"seq", "parallel"} {
			for _, im := range impls {
				b.Run("mode="+mode+"/impl="+im.name, func(b *testing.B) {
					b.ReportAllocs()
					if mode == "seq" {
						for b.Loop() {
							im.op()
						}
						return
					}
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							im.op()
						}
					})
				})
			}
		}
	}
	native := func(s breaker.Settings) *breaker.Breaker {
		cb, err := breaker.New(s)
		if err != nil {
			b.Fatal(err)
		}
		return cb
	}
	do := func(cb *breaker.Breaker) func() { return func() { _ = cb.Do(ctx, call) } }
	allow := func(cb *breaker.Breaker) func() {
		return func() {
			if p, err := cb.Allow(ctx); err == nil {
				p.Done(nil)
			}
		}
	}

	// Rule: 5 consecutive failures (gobreaker's usual configuration).
	consecutive := func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 }
	nc := native(breaker.Settings{ConsecutiveFailures: 5})
	ge := native(breaker.Settings{ConsecutiveFailures: 5, Engine: breaker.EngineGobreaker})
	gb := gobreaker.NewCircuitBreaker[any](gobreaker.Settings{ReadyToTrip: consecutive})
	ts := gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{ReadyToTrip: consecutive})
	b.Run("rule=consecutive", func(b *testing.B) {
		run(b, []impl{
			{"gobreaker", func() { _, _ = gb.Execute(exec) }},
			{"gobreaker-twostep", func() {
				if done, err := ts.Allow(); err == nil {
					done(nil)
				}
			}},
			{"callguard", do(nc)},
			{"callguard-twostep", allow(nc)},
			{"callguard-on-gobreaker", do(ge)},
		})
	})

	// Rule: the defaults, 10 consecutive or 50 % over a sliding 10 s window.
	window := func(c gobreaker.Counts) bool {
		calls := c.TotalSuccesses + c.TotalFailures
		return c.ConsecutiveFailures >= 10 || (calls >= 20 && 2*c.TotalFailures >= calls)
	}
	nw := native(breaker.Settings{})
	gw := gobreaker.NewCircuitBreaker[any](gobreaker.Settings{Interval: 10 * time.Second, BucketPeriod: time.Second, ReadyToTrip: window})
	tw := gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{Interval: 10 * time.Second, BucketPeriod: time.Second, ReadyToTrip: window})
	b.Run("rule=window", func(b *testing.B) {
		run(b, []impl{
			{"gobreaker", func() { _, _ = gw.Execute(exec) }},
			{"gobreaker-twostep", func() {
				if done, err := tw.Allow(); err == nil {
					done(nil)
				}
			}},
			{"callguard", do(nw)},
			{"callguard-twostep", allow(nw)},
		})
	})

	// Rule: 10 % of the last 50 calls (no gobreaker equivalent).
	nn := native(breaker.Settings{FailureRate: 0.1, WindowCalls: 50})
	b.Run("rule=count-window", func(b *testing.B) {
		run(b, []impl{{"callguard", do(nn)}, {"callguard-twostep", allow(nn)}})
	})
}
