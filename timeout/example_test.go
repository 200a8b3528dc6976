package timeout_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/callguard/callguard/timeout"
)

func ExamplePolicy_Do() {
	p, _ := timeout.New(10 * time.Millisecond)
	err := p.Do(context.Background(), func(ctx context.Context) error {
		<-ctx.Done() // a downstream that hangs
		return ctx.Err()
	})
	fmt.Println(err, errors.Is(err, timeout.ErrTimeout), errors.Is(err, context.DeadlineExceeded))
	// Output: timeout: call exceeded 10ms true true
}
