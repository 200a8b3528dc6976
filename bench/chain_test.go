package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"github.com/cenkalti/backoff/v4"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"
	"github.com/sony/gobreaker/v2"
)

// succeed is the downstream of the benchmarks: it succeeds at once. Every
// implementation runs it with the context of the attempt, so that it is the
// same work.
func succeed(context.Context) error { return nil }

// callFunc is the downstream an implementation is built around.
type callFunc = func(context.Context) error

// op runs call once through one implementation, with a per-call context.
// Each op is built once, outside the timed loop, and is safe for
// concurrent use.
type op func(ctx context.Context) error

type impl struct {
	name string
	new  func(tb testing.TB, call callFunc) op
}

type shape struct {
	name  string
	impls []impl
}

var shapes = []shape{
	{"floor", []impl{
		{"context-withtimeout", newContextWithTimeout},
	}},
	{"retry-breaker-timeout", []impl{
		{"callguard", newCallguardRetryBreakerTimeout},
		{"failsafe", newFailsafeRetryBreakerTimeout},
		{"handwired", newHandwiredRetryBreakerTimeout},
	}},
	{"timeout-retry-breaker-timeout", []impl{
		{"callguard", newCallguardTimeoutRetryBreakerTimeout},
		{"failsafe", newFailsafeTimeoutRetryBreakerTimeout},
	}},
	{"retry-breaker", []impl{
		{"callguard", newCallguardRetryBreaker},
		{"failsafe", newFailsafeRetryBreaker},
	}},
}

// BenchmarkChain measures the success path: every attempt succeeds, the
// breaker stays closed, no timeout fires. Compare with
//
//	benchstat -col /impl out.txt
func BenchmarkChain(b *testing.B) {
	for _, s := range shapes {
		b.Run("shape="+s.name, func(b *testing.B) {
			for _, im := range s.impls {
				b.Run("impl="+im.name, func(b *testing.B) {
					b.Run("mode=seq", func(b *testing.B) {
						do := im.new(b, succeed)
						ctx := context.Background()
						b.ReportAllocs()
						for b.Loop() {
							if err := do(ctx); err != nil {
								b.Fatal(err)
							}
						}
					})
					b.Run("mode=parallel", func(b *testing.B) {
						do := im.new(b, succeed)
						b.ReportAllocs()
						b.ResetTimer()
						runParallel(b, do)
					})
				})
			}
		})
	}
}

// TestImplsEquivalent checks that the implementations of a shape do the
// same work: on success, call runs once per op with a context that an
// attempt timeout, where the shape has one, can cancel; on failure, retry is
// outside the breaker (the breaker counts every attempt and opens on the
// 5th failure, in the 2nd op) and the retry stops at once on the open
// breaker, so that 3 ops run call 3+2+0 times.
func TestImplsEquivalent(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for real backoff delays")
	}
	for _, s := range shapes {
		for _, im := range s.impls {
			t.Run(s.name+"/"+im.name, func(t *testing.T) {
				t.Parallel()
				var calls int
				var cancellable bool
				do := im.new(t, func(ctx context.Context) error {
					calls++
					cancellable = ctx.Done() != nil
					return nil
				})
				if err := do(context.Background()); err != nil {
					t.Fatal(err)
				}
				if calls != 1 {
					t.Errorf("success: call ran %d times, want 1", calls)
				}
				if want := s.name != "retry-breaker"; cancellable != want {
					t.Errorf("success: call's context cancellable = %v, want %v", cancellable, want)
				}
				if s.name == "floor" {
					return
				}

				calls = 0
				errDown := errors.New("down")
				do = im.new(t, func(context.Context) error {
					calls++
					return errDown
				})
				want := []int{3, 5, 5}
				for i, w := range want {
					err := do(context.Background())
					if err == nil {
						t.Fatalf("failure op %d: nil error", i+1)
					}
					if calls != w {
						t.Errorf("failure op %d: %d calls in all, want %d (err: %v)", i+1, calls, w, err)
					}
				}
			})
		}
	}
}

// --- floor ---

func newContextWithTimeout(_ testing.TB, call callFunc) op {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		err := call(ctx)
		cancel()
		return err
	}
}

// --- callguard ---

func cgRetry(tb testing.TB) *retry.Policy {
	p, err := retry.New(retry.MaxAttempts(3))
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func cgBreaker(tb testing.TB) *breaker.Breaker {
	br, err := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	if err != nil {
		tb.Fatal(err)
	}
	return br
}

func cgTimeout(tb testing.TB, d time.Duration) *timeout.Policy {
	p, err := timeout.New(d)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func cgChain(tb testing.TB, call callFunc, policies ...chain.Policy) op {
	c, err := chain.New(policies...)
	if err != nil {
		tb.Fatal(err)
	}
	return func(ctx context.Context) error { return c.Do(ctx, call) }
}

func newCallguardRetryBreakerTimeout(tb testing.TB, call callFunc) op {
	return cgChain(tb, call, cgRetry(tb), cgBreaker(tb), cgTimeout(tb, time.Second))
}

func newCallguardTimeoutRetryBreakerTimeout(tb testing.TB, call callFunc) op {
	return cgChain(tb, call, cgTimeout(tb, 2*time.Second), cgRetry(tb), cgBreaker(tb), cgTimeout(tb, time.Second))
}

func newCallguardRetryBreaker(tb testing.TB, call callFunc) op {
	return cgChain(tb, call, cgRetry(tb), cgBreaker(tb))
}

// --- failsafe-go ---
//
// failsafe.With(a, b, c) composes a(b(c(fn))): the first policy is the
// outermost, as in chain.New.

func fsRetry() failsafe.Policy[any] {
	// 3 attempts, no delay by default; give up on an open breaker, as
	// callguard's retry does by default.
	return retrypolicy.NewBuilder[any]().
		WithMaxAttempts(3).
		AbortOnErrors(circuitbreaker.ErrOpen).
		Build()
}

func fsBreaker() failsafe.Policy[any] {
	// Count-based: 5 failures out of the last 5 calls = 5 consecutive.
	return circuitbreaker.NewBuilder[any]().WithFailureThreshold(5).Build()
}

// fsOp runs the executor with the per-call context; the fn hands the
// execution's context (cancelled by the innermost timeout) to call.
func fsOp(call callFunc, policies ...failsafe.Policy[any]) op {
	ex := failsafe.With(policies...)
	fn := func(e failsafe.Execution[any]) error { return call(e.Context()) }
	return func(ctx context.Context) error {
		return ex.WithContext(ctx).RunWithExecution(fn)
	}
}

func newFailsafeRetryBreakerTimeout(_ testing.TB, call callFunc) op {
	return fsOp(call, fsRetry(), fsBreaker(), fstimeout.New[any](time.Second))
}

func newFailsafeTimeoutRetryBreakerTimeout(_ testing.TB, call callFunc) op {
	return fsOp(call, fstimeout.New[any](2*time.Second), fsRetry(), fsBreaker(), fstimeout.New[any](time.Second))
}

func newFailsafeRetryBreaker(_ testing.TB, call callFunc) op {
	return fsOp(call, fsRetry(), fsBreaker())
}

// --- hand-wired: backoff/v4 + gobreaker/v2 + context.WithTimeout ---

func newHandwiredRetryBreakerTimeout(_ testing.TB, call callFunc) op {
	cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 },
	})
	return func(ctx context.Context) error {
		attempt := func() error {
			_, err := cb.Execute(func() (struct{}, error) {
				actx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				return struct{}{}, call(actx)
			})
			if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
				return backoff.Permanent(err)
			}
			return err
		}
		// ExponentialBackOff is stateful: one per call. 2 retries = 3 attempts.
		bo := backoff.WithContext(backoff.WithMaxRetries(backoff.NewExponentialBackOff(), 2), ctx)
		return backoff.Retry(attempt, bo)
	}
}

// runParallel runs do from b.RunParallel's goroutines until the benchmark
// ends or do fails.
func runParallel(b *testing.B, do func(context.Context) error) {
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := do(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
