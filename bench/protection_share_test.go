package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/scenario"
)

// TestDeadlineShareKeepsTheBreakerClosed is the mechanism behind the
// recommended limit's DeadlineShare, in the cell it was made for: the
// capacity drop with a deep queue under an open loop. Without it
// (cg-share-never) the limit follows the queue up, the answers come near
// the callers' deadline, attempts time out in a row and the breaker opens
// on a downstream that is still serving, in every seed; with it the
// breaker refuses no request, and fewer attempts time out.
func TestDeadlineShareKeepsTheBreakerClosed(t *testing.T) {
	var sc scenario.Scenario
	for _, s := range scenario.Scenarios {
		if s.Name == "capacity30-deep" {
			sc = s
		}
	}
	never := recommended.with(func(c *cg) { c.deadlineShare = -1 })
	for _, seed := range seeds {
		with, timeoutsWith := breakerRefusals(t, sc, recommended, seed)
		without, timeoutsWithout := breakerRefusals(t, sc, never, seed)
		t.Logf("seed %d: requests refused by the breaker %d with DeadlineShare, %d without; attempts timed out %d and %d", seed, with, without, timeoutsWith, timeoutsWithout)
		if with != 0 || without == 0 || timeoutsWith >= timeoutsWithout {
			t.Errorf("seed %d: the breaker refused %d requests with DeadlineShare and %d without, %d and %d attempts timed out; want 0, more than 0, and fewer timeouts with it",
				seed, with, without, timeoutsWith, timeoutsWithout)
		}
	}
}

// breakerRefusals runs c in sc under the open loop and counts the requests
// the breaker refused and the attempts that timed out.
func breakerRefusals(t *testing.T, sc scenario.Scenario, c cg, seed uint64) (refused, timedOut int64) {
	t.Helper()
	var open, timeouts atomic.Int64
	synctest.Test(t, func(t *testing.T) {
		st, err := c.stack(seed)
		if err != nil {
			t.Fatal(err)
		}
		counting := scenario.StackFunc(func(ctx context.Context, call func(context.Context) error) error {
			err := st.Do(ctx, func(ctx context.Context) error {
				err := call(ctx)
				if errors.Is(err, context.DeadlineExceeded) {
					timeouts.Add(1)
				}
				return err
			})
			if errors.Is(err, breaker.ErrOpen) {
				open.Add(1)
			}
			return err
		})
		if _, err := scenario.Run(scenario.Cell{Server: scenario.Model, Scenario: sc, Load: scenario.Loads[0], Seed: seed}, counting); err != nil {
			t.Fatal(err)
		}
	})
	return open.Load(), timeouts.Load()
}
