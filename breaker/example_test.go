package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/sony/gobreaker/v2"
)

func Example() {
	b, err := breaker.New(breaker.Settings{
		Name:                "payments",
		ConsecutiveFailures: 3,
		OpenTimeout:         30 * time.Second,
		OnStateChange: func(from, to breaker.State) {
			fmt.Printf("%v → %v\n", from, to)
		},
	})
	if err != nil {
		panic(err)
	}
	down := errors.New("connection refused")
	for i := 1; i <= 5; i++ {
		err := b.Do(context.Background(), func(ctx context.Context) error { return down })
		var open *breaker.OpenError
		if errors.As(err, &open) {
			fmt.Printf("call %d: rejected by %q for %v more (ErrOpen: %t)\n",
				i, open.Name, open.Remaining().Round(time.Second), errors.Is(err, breaker.ErrOpen))
			continue
		}
		fmt.Printf("call %d: %v\n", i, err)
	}
	// Output:
	// call 1: connection refused
	// call 2: connection refused
	// closed → open
	// call 3: connection refused
	// call 4: rejected by "payments" for 30s more (ErrOpen: true)
	// call 5: rejected by "payments" for 30s more (ErrOpen: true)
}

// The two-step form, for interceptors and streams: Allow admits the call,
// Done reports how it ended.
func ExampleBreaker_Allow() {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 1})
	ctx := context.Background()
	p, err := b.Allow(ctx)
	if err != nil {
		fmt.Println("rejected:", err)
		return
	}
	p.Done(errors.New("stream ended with an error"))
	_, err = b.Allow(ctx)
	fmt.Println(b.State(), errors.Is(err, breaker.ErrOpen))
	// Output: open true
}

// Closing on 7 successes among 10 probes lets a breaker close on a
// downstream that fails 1 call in 10; requiring all 10 rarely would.
func ExampleSettings_halfOpenSuccesses() {
	b, err := breaker.New(breaker.Settings{
		ConsecutiveFailures: 5,
		HalfOpenProbes:      10,
		HalfOpenSuccesses:   7,
	})
	fmt.Println(b, err)
	_, err = breaker.New(breaker.Settings{HalfOpenProbes: 3, HalfOpenSuccesses: 4})
	fmt.Println(err)
	// Output:
	// breaker(5 consecutive, open 10s, 7 of 10 probes) <nil>
	// breaker: Settings.HalfOpenSuccesses = 4: must be <= HalfOpenProbes (3), or the breaker can never close
}

// An existing gobreaker breaker can sit in a chain as a *breaker.Breaker.
func ExampleFromGobreaker() {
	cb := gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 2 },
	})
	b, err := breaker.FromGobreaker(cb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		err := b.Do(ctx, func(context.Context) error { return errors.New("503") })
		fmt.Println(err, errors.Is(err, breaker.ErrOpen))
	}
	// Output:
	// 503 false
	// 503 false
	// breaker: open true
}
