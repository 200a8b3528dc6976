package limit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/limit"
)

func Example() {
	l, err := limit.New(limit.Settings{
		Algorithm:    limit.AIMD(limit.AIMDSettings{}),
		InitialLimit: 10,
		MinLimit:     2,
		MaxLimit:     50,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	timedOut := fmt.Errorf("attempt: %w", context.DeadlineExceeded)
	for range 3 {
		_ = l.Do(ctx, func(context.Context) error { return timedOut })
	}
	fmt.Println("after 3 timeouts:", l.Limit()) // 10 → 9 → 8 → 7
	fmt.Println(l.Settings().Algorithm)
	// Output:
	// after 3 timeouts: 7
	// AIMD(backoff 0.9)
}

// A bulkhead of 1 slot and no queue: a second call while the first holds
// the slot is refused, with an error that every callguard policy
// recognizes as a local refusal.
func ExampleBulkhead() {
	b, _ := limit.NewBulkhead(limit.BulkheadSettings{MaxConcurrent: 1})
	ctx := context.Background()
	_ = b.Do(ctx, func(ctx context.Context) error {
		err := b.Do(ctx, func(context.Context) error { return nil })
		var re *limit.RejectedError
		if errors.As(err, &re) {
			fmt.Printf("%s; ErrLimited %t, callguard.ErrRejected %t\n", re.Reason,
				errors.Is(err, limit.ErrLimited), errors.Is(err, callguard.ErrRejected))
		}
		fmt.Println(err)
		return nil
	})
	// Output:
	// queue full; ErrLimited true, callguard.ErrRejected true
	// limit: rejected (queue full: 1 in flight, limit 1, 0 queued)
}

// The two-step form, for interceptors and streams: Acquire admits the
// call (waiting in the queue if need be), Done releases the slot and
// feeds the algorithm.
func ExampleLimiter_Acquire() {
	l, _ := limit.New(limit.Settings{InitialLimit: 4, MaxQueue: 8, MaxWait: 50 * time.Millisecond})
	p, err := l.Acquire(context.Background())
	if err != nil {
		fmt.Println("refused:", err)
		return
	}
	fmt.Println(l.InFlight(), "in flight of", l.Limit())
	p.Done(nil) // the stream ended without error
	fmt.Println(l.InFlight(), "in flight")
	// Output:
	// 1 in flight of 4
	// 0 in flight
}
