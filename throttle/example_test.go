package throttle_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/throttle"
)

func Example() {
	th, err := throttle.New(throttle.Settings{}) // K 2, 1-minute window, p ≤ 0.9, from 20 requests
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	overloaded := errors.New("resource exhausted")

	// 30 accepted calls, then the downstream refuses: p rises once fewer
	// than 1 request in 2 is accepted. Rejected calls count as requests.
	for range 30 {
		_ = th.Do(ctx, func(context.Context) error { return nil })
	}
	fmt.Printf("after 30 accepts: p = %.2f\n", th.RejectionRate())
	for range 70 {
		_ = th.Do(ctx, func(context.Context) error { return overloaded })
	}
	requests, accepts := th.Counts()
	fmt.Printf("after 70 refusals: p = %.2f (%d requests, %d accepts)\n", th.RejectionRate(), requests, accepts)

	// While the downstream refuses, p climbs to its cap: then 9 calls in
	// 10 are rejected locally, without calling it.
	for range 1000 {
		_ = th.Do(ctx, func(context.Context) error { return overloaded })
	}
	for {
		err := th.Do(ctx, func(context.Context) error { return overloaded })
		var rejected *throttle.RejectedError
		if errors.As(err, &rejected) {
			fmt.Printf("rejected with p = %.2f (ErrThrottled: %t, callguard.ErrRejected: %t)\n",
				rejected.Probability, errors.Is(err, throttle.ErrThrottled), errors.Is(err, callguard.ErrRejected))
			break
		}
	}
	// Output:
	// after 30 accepts: p = 0.00
	// after 70 refusals: p = 0.40 (100 requests, 30 accepts)
	// rejected with p = 0.90 (ErrThrottled: true, callguard.ErrRejected: true)
}

// The two-step form, for interceptors and streams: Allow decides, Done
// reports how the admitted call ended.
func ExampleThrottle_Allow() {
	th, _ := throttle.New(throttle.Settings{MinRequests: 1, MaxRejectionRate: 1})
	ctx := context.Background()
	// A caller that gives up counts neither way: its request is taken back.
	p, err := th.Allow(ctx) // p = 0: admitted
	if err != nil {
		fmt.Println("rejected:", err)
		return
	}
	p.DoneNeutral()
	requests, _ := th.Counts()
	fmt.Printf("p = %.2f (requests: %d)\n", th.RejectionRate(), requests)

	p, err = th.Allow(ctx) // p = 0 still: admitted
	if err != nil {
		fmt.Println("rejected:", err)
		return
	}
	p.Done(errors.New("stream ended: unavailable"))
	requests, _ = th.Counts()
	fmt.Printf("p = %.2f (requests: %d)\n", th.RejectionRate(), requests) // (1 − 2·0) / (1 + 1)
	// Output:
	// p = 0.00 (requests: 0)
	// p = 0.50 (requests: 1)
}

// IsAccepted decides the errors that are answers from a healthy
// downstream, such as an invalid argument.
func ExampleSettings_isAccepted() {
	errInvalid := errors.New("invalid argument")
	th, _ := throttle.New(throttle.Settings{
		MinRequests: 1,
		IsAccepted:  func(err error) bool { return errors.Is(err, errInvalid) },
	})
	for range 10 {
		_ = th.Do(context.Background(), func(context.Context) error { return errInvalid })
	}
	requests, accepts := th.Counts()
	fmt.Println(requests, accepts, th.RejectionRate())
	_, err := throttle.New(throttle.Settings{K: 0.5})
	fmt.Println(err)
	// Output:
	// 10 10 0
	// throttle: Settings.K = 0.5: must be >= 1 (or 0 for the default, 2)
}
