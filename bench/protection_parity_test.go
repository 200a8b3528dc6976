package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/callguard/callguard/internal/scenario"
	"github.com/cenkalti/backoff/v4"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"
	"github.com/sony/gobreaker/v2"
)

// parityBulkhead is the parity peers' bulkhead: sized to the downstream,
// its 10 workers and 6 more waiting, so that a healthy load (about 6 in
// flight at 60 % of its capacity) is never refused and an overload is
// held to what the downstream serves with a short queue (the size of the
// experimental x-bulkhead16 row of callguard's).
const parityBulkhead = 16

// parityPeers are the peers as a careful engineer configures them, beyond
// their documentation and at callguard's numbers: the retry leaves the
// downstream's overload refusals and an open breaker unretried, the
// breaker does not count the downstream's overload refusals nor the
// stack's own bulkhead's rejections as failures, and a fixed bulkhead
// sized to the downstream (parityBulkhead) sits inside the breaker,
// failsafe-go's documented place for it (retry → breaker → bulkhead →
// timeout).
func parityPeers(c cg) []stackDef {
	retries := c.attempts - 1
	probes := max(c.probes, 3)
	closeOn := cmp.Or(c.successes, probes)
	consecutive, rate := c.tripRule()
	judged := func(err error) bool { // a failure of the downstream
		return err != nil && !errors.Is(err, scenario.ErrOverloaded) && !errors.Is(err, bulkhead.ErrFull) && !errors.Is(err, errHandwiredFull)
	}
	retried := func(err error) bool {
		return err != nil && !errors.Is(err, scenario.ErrOverloaded) && !errors.Is(err, circuitbreaker.ErrOpen) &&
			!errors.Is(err, gobreaker.ErrOpenState) && !errors.Is(err, gobreaker.ErrTooManyRequests)
	}
	common := fmt.Sprintf("retry %d attempts, backoff %v→%v ×2, jitter 0.2, overload refusals and an open breaker not retried; ", c.attempts, c.initial, c.max)
	tail := fmt.Sprintf("; bulkhead %d at once, no queue, inside the breaker, its rejections and the downstream's overload refusals not counted by the breaker; timeout %v per attempt (fixed)", parityBulkhead, c.attempt)
	// failsafe-go's breaker takes one rule: c's rate, or its count when c
	// has no rate (a rate of 0 would trip on any 20 calls).
	fsRule := fmt.Sprintf("%g%% of at least 20 calls over 10s", 100*rate)
	hwRule := fmt.Sprintf("%d consecutive failures or %g%% of at least 20 calls over 10s (10 buckets)", consecutive, 100*rate)
	if rate == 0 {
		fsRule = fmt.Sprintf("%d consecutive failures (one rule only)", consecutive)
		hwRule = fmt.Sprintf("%d consecutive failures", consecutive)
	}
	return []stackDef{
		{"failsafe-parity", common + fmt.Sprintf("breaker opens on %s, open %v, closes on %d of %d probes", fsRule, c.open, closeOn, probes) + tail,
			func(seed uint64) (scenario.Stack, error) {
				rp := retrypolicy.NewBuilder[any]().WithDelayFunc(failsafeBackoff(c.initial, c.max, seed)).WithMaxRetries(retries).
					HandleIf(func(_ any, err error) bool { return retried(err) }).Build()
				cbb := circuitbreaker.NewBuilder[any]().WithDelay(c.open).WithSuccessThresholdRatio(uint(closeOn), uint(probes))
				if rate > 0 {
					cbb = cbb.WithFailureRateThreshold(rate, 20, 10*time.Second)
				} else {
					cbb = cbb.WithFailureThreshold(uint(consecutive))
				}
				cb := cbb.HandleIf(func(_ any, err error) bool { return judged(err) }).Build()
				return failsafeExec(failsafe.With[any](rp, cb, bulkhead.New[any](parityBulkhead), fstimeout.New[any](c.attempt))), nil
			}},
		{"handwired-parity", common + fmt.Sprintf("breaker (gobreaker/v2) opens on %s, open %v, closes on %d of %d probes (gobreaker: all must succeed)", hwRule, c.open, probes, probes) + tail,
			func(uint64) (scenario.Stack, error) {
				cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
					Name: "downstream", MaxRequests: uint32(probes), Interval: 10 * time.Second, BucketPeriod: time.Second, Timeout: c.open,
					ReadyToTrip: func(n gobreaker.Counts) bool {
						return int(n.ConsecutiveFailures) >= consecutive ||
							rate > 0 && n.Requests >= 20 && float64(n.TotalFailures) >= rate*float64(n.Requests)
					},
					IsExcluded: func(err error) bool { return err != nil && !judged(err) },
				})
				slots := make(chan struct{}, parityBulkhead)
				return scenario.StackFunc(func(ctx context.Context, call func(context.Context) error) error {
					attempt := func() error {
						_, err := cb.Execute(func() (struct{}, error) {
							select {
							case slots <- struct{}{}:
								defer func() { <-slots }()
							default:
								return struct{}{}, errHandwiredFull
							}
							actx, cancel := context.WithTimeout(ctx, c.attempt)
							defer cancel()
							return struct{}{}, call(actx)
						})
						if err != nil && !retried(err) {
							return backoff.Permanent(err)
						}
						return err
					}
					eb := backoff.NewExponentialBackOff()
					eb.InitialInterval, eb.MaxInterval, eb.Multiplier, eb.RandomizationFactor = c.initial, c.max, 2, 0.2
					return backoff.Retry(attempt, backoff.WithContext(backoff.WithMaxRetries(eb, uint64(retries)), ctx))
				}), nil
			}},
	}
}

// errHandwiredFull is the hand-wired parity peer's bulkhead rejection.
var errHandwiredFull = errors.New("bulkhead full")
