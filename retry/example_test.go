package retry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/callguard/callguard/retry"
)

func Example() {
	p, err := retry.New(
		retry.MaxAttempts(3), // the first call and 2 retries
		retry.Exponential(time.Millisecond, 10*time.Millisecond),
		retry.OnRetry(func(attempt int, err error, wait time.Duration) {
			fmt.Printf("attempt %d failed: %v\n", attempt, err)
		}),
	)
	if err != nil {
		panic(err)
	}
	err = p.Do(context.Background(), func(ctx context.Context) error {
		return errors.New("connection reset")
	})
	fmt.Println(err)
	var ex *retry.ExhaustedError
	fmt.Println(errors.As(err, &ex), ex.Attempts)
	// Output:
	// attempt 1 failed: connection reset
	// attempt 2 failed: connection reset
	// retry: gave up after 3 attempts (attempts used up): connection reset
	// true 3
}
