package hedge_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/hedge"
)

// A first attempt that hangs is hedged after 20 ms; the hedge answers in
// 10 ms and the hung attempt is canceled.
func Example() {
	p, err := hedge.New(hedge.Settings{Delay: 20 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	var attempts atomic.Int32
	err = p.Do(context.Background(), func(ctx context.Context) error {
		if attempts.Add(1) == 1 {
			<-ctx.Done() // hangs until the hedge wins
			return ctx.Err()
		}
		return nil
	})
	fmt.Println(err, p.Stats())
	// Output: <nil> {1 1 1}
}

// The delay follows the 95th percentile of the first attempts' latencies.
func ExampleSettings_quantile() {
	p, _ := hedge.New(hedge.Settings{Delay: 50 * time.Millisecond, Quantile: 0.95, MinSamples: 64})
	fmt.Println(p.Delay()) // until 64 answers are seen
	// Output: 50ms
}
