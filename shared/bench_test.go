package shared_test

import (
	"context"
	"testing"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/shared"
	"github.com/sony/gobreaker/v2"
)

// BenchmarkSuccess: a successful call through a breaker shared through
// Redis, against the same breaker alone (a call never waits on Redis: the
// difference is the sharing goroutine's share of the processor), and
// through gobreaker's DistributedCircuitBreaker (three Redis round trips
// a call, and a lock), all on loopback.
//
//	go test ./shared -run '^$' -bench Success -count 8 | benchstat -col /impl -
func BenchmarkSuccess(b *testing.B) {
	srv := startRedis(b, "")
	for _, impl := range []string{"local", "shared", "gobreaker-distributed"} {
		b.Run("impl="+impl, func(b *testing.B) {
			var p interface {
				Do(context.Context, func(context.Context) error) error
			}
			br := must(breaker.New(breaker.Settings{}))
			p = br
			switch impl {
			case "shared":
				sh := must(shared.Share(br, shared.Options{Client: srv.clientB(b), Name: "bench"}))
				defer sh.Close()
			case "gobreaker-distributed":
				p = must(shared.NewGobreaker(shared.GobreakerStore{Client: srv.clientB(b)}, gobreaker.Settings{Name: "bench"}))
			}
			call := func(context.Context) error { return nil }
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_ = p.Do(ctx, call)
			}
		})
	}
}

// BenchmarkFleet: 20 instances, each with 1,000 keys shared through a
// Group, 50 failing every call, 50 succeeding, 900 idle; every active key
// called once each 50 ms on every instance (see keyedFleet.run). It
// reports the downstream calls on the failing keys until every instance is
// open on each, as a fraction of local breakers' (goal ≤ 0.25); each
// instance's Redis round trips and commands a second in the steady state,
// over 20 + 2 × the 100 active keys (goal ≤ 1, for round trips); and the
// heap per shared key beyond its breaker's (goal ≤ 1,536 B).
//
//	go test ./shared -run '^$' -bench Fleet -benchtime 1x -count 3
func BenchmarkFleet(b *testing.B) {
	srv := startRedis(b, "")
	f := keyedFleet{instances: 20, keys: 1000, failing: 50, healthy: 50}
	for b.Loop() {
		local := f.run(b, nil, false)
		sh := f.run(b, srv, true)
		if sh.allOpen == 0 {
			b.Fatal("not every instance opened on every failing key within 6 s")
		}
		if sh.healthyOpened != 0 {
			b.Fatalf("%d healthy keys opened", sh.healthyOpened)
		}
		var trips, cmds float64
		for i := range sh.trips {
			trips = max(trips, float64(sh.trips[i])/sh.steady.Seconds())
			cmds = max(cmds, float64(sh.cmds[i])/sh.steady.Seconds())
		}
		bound := float64(20 + 2*(f.failing+f.healthy))
		b.ReportMetric(float64(sh.failingCalls)/float64(local.failingCalls), "calls/local")
		b.ReportMetric(float64(sh.allOpen.Milliseconds()), "ms-to-all-open")
		b.ReportMetric(trips, "trips/s/inst")
		b.ReportMetric(trips/bound, "trips/goal")
		b.ReportMetric(cmds, "cmds/s/inst")
		b.ReportMetric(sh.perKeyBytes, "B/key")
	}
}
