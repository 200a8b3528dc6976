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
