package shared_test

import (
	"context"
	"testing"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/shared"
)

// BenchmarkSuccess: a successful call through a breaker shared through
// Redis, against the same breaker alone: a call never waits on Redis, so
// the difference is the sharing goroutine's share of the processor.
//
//	go test ./shared -run '^$' -bench Success -count 8 | benchstat -col /impl -
func BenchmarkSuccess(b *testing.B) {
	srv := startRedis(b, "")
	for _, impl := range []string{"local", "shared"} {
		b.Run("impl="+impl, func(b *testing.B) {
			br := must(breaker.New(breaker.Settings{}))
			if impl == "shared" {
				sh := must(shared.Share(br, shared.Options{Client: srv.clientB(b), Name: "bench"}))
				defer sh.Close()
			}
			call := func(context.Context) error { return nil }
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_ = br.Do(ctx, call)
			}
		})
	}
}
