package fallback_test

import (
	"context"
	"fmt"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/fallback"
)

func Example() {
	cache := "last good price: 42"
	var price string
	fb, _ := fallback.New(func(ctx context.Context, err error) error {
		price = cache + " (stale)"
		return nil
	})
	err := fb.Do(context.Background(), func(ctx context.Context) error {
		return breaker.ErrOpen // the breaker rejected the call
	})
	fmt.Println(price, err)
	// Output: last good price: 42 (stale) <nil>
}
