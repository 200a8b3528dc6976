package hedge_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/hedge"
)

// TestAbortCancelsHedges: the first attempt panics at 5 ms while a hedge
// started at 1 ms waits for its context, under a caller's context with no
// deadline: the hedge is canceled, waited for, and the panic reaches the
// caller at 5 ms.
func TestAbortCancelsHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := must(hedge.New(hedge.Settings{Delay: time.Millisecond}))
		start := time.Now()
		hedgeEnded := make(chan error, 1)
		var got any
		func() {
			defer func() { got = recover() }()
			var n atomic.Int32
			_ = p.Do(context.Background(), func(ctx context.Context) error {
				if n.Add(1) == 1 {
					time.Sleep(5 * time.Millisecond)
					panic("first attempt")
				}
				<-ctx.Done()
				hedgeEnded <- ctx.Err()
				return ctx.Err()
			})
		}()
		if got != "first attempt" || time.Since(start) != 5*time.Millisecond {
			t.Errorf("recovered %v after %v; want the first attempt's panic after 5ms", got, time.Since(start))
		}
		select {
		case err := <-hedgeEnded:
			if err == nil {
				t.Error("the hedge's context did not end")
			}
		default:
			t.Error("Do returned before the hedge had ended")
		}
	})
}
