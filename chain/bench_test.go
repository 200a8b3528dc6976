package chain_test

import (
	"context"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// BenchmarkDo is one successful call through chains of the shapes the
// chain runs itself: the recommended order without and with a limit, and
// a hedge that makes its attempts' contexts with the attempt timeout
// inside it (hoisted), each without and with a caller's deadline.
func BenchmarkDo(b *testing.B) {
	shapes := []struct {
		name string
		ps   func() []chain.Policy
	}{
		{"retry-breaker-timeout", func() []chain.Policy {
			return []chain.Policy{
				mustNew(retry.New(retry.MaxAttempts(3))),
				mustNew(breaker.New(breaker.Settings{})),
				mustNew(timeout.New(time.Second)),
			}
		}},
		{"retry-limit-breaker-timeout", func() []chain.Policy {
			return []chain.Policy{
				mustNew(retry.New(retry.MaxAttempts(3))),
				mustNew(limit.New(limit.Settings{InitialLimit: 1024, MaxLimit: 1024})),
				mustNew(breaker.New(breaker.Settings{})),
				mustNew(timeout.New(time.Second)),
			}
		}},
		{"hedge-limit-breaker-timeout", func() []chain.Policy {
			return []chain.Policy{
				mustNew(hedge.New(hedge.Settings{Delay: time.Hour})),
				mustNew(limit.New(limit.Settings{InitialLimit: 1024, MaxLimit: 1024})),
				mustNew(breaker.New(breaker.Settings{})),
				mustNew(timeout.New(time.Second)),
			}
		}},
	}
	call := func(context.Context) error { return nil }
	for _, sh := range shapes {
		c := mustNew(chain.New(sh.ps()...))
		for _, dl := range []bool{false, true} {
			name := sh.name
			if dl {
				name += "/caller-deadline"
			}
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				if dl {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Hour)
					defer cancel()
				}
				b.ReportAllocs()
				for b.Loop() {
					if err := c.Do(ctx, call); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
