package callguard_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
)

var err503 = errors.New("503 Service Unavailable")

func codes(fs []chain.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Code)
	}
	return out
}

// TestRetryInsideVsOutsideBreaker is SEEDS C1: the downstream always
// answers 503, 12 logical requests, 3 attempts each, and a breaker that
// opens on 5 consecutive failures. Retry inside the breaker: it opens after
// request 5 and the downstream receives 15 calls. Retry outside: it opens
// after request 2, the downstream receives 5 calls, and the retry gives up
// at once on every rejection. The seed counts 11 rejected attempts there:
// its retry made request 2's third attempt into the breaker its second had
// just opened. callguard's retry asks the breaker before it waits, and
// gives up on that request without the doomed attempt: 10 rejections, one
// per later request.
func TestRetryInsideVsOutsideBreaker(t *testing.T) {
	for _, tc := range []struct {
		name                             string
		retryOutside                     bool
		openedAfter, reached, calls, rej int
		finding                          string
	}{
		{name: "breaker wraps retry", openedAfter: 5, reached: 5, calls: 15, rej: 7, finding: "CG002"},
		{name: "retry wraps breaker", retryOutside: true, openedAfter: 2, reached: 2, calls: 5, rej: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				request := 0
				openedAfter := 0
				b, err := breaker.New(breaker.Settings{
					ConsecutiveFailures: 5,
					HalfOpenProbes:      3,
					OpenTimeout:         time.Minute,
					OnStateChange: func(from, to breaker.State) {
						if to == breaker.StateOpen {
							openedAfter = request
						}
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				r, err := retry.New(retry.MaxAttempts(3), retry.Constant(10*time.Millisecond), retry.Jitter(0))
				if err != nil {
					t.Fatal(err)
				}
				order := []chain.Policy{b, r}
				if tc.retryOutside {
					order = []chain.Policy{r, b}
				}
				c, err := chain.New(order...)
				if err != nil {
					t.Fatal(err)
				}
				var calls atomic.Int64
				reached := 0
				for request = 1; request <= 12; request++ {
					hit := false
					_ = c.Do(context.Background(), func(context.Context) error {
						calls.Add(1)
						hit = true
						return err503
					})
					if hit {
						reached++
					}
				}
				got := []int{openedAfter, reached, int(calls.Load()), int(b.Counts().RejectedOpen)}
				want := []int{tc.openedAfter, tc.reached, tc.calls, tc.rej}
				if !slices.Equal(got, want) {
					t.Errorf("%v: opened after request %d, %d requests reached the downstream, %d calls, %d attempts rejected; want %v",
						c, got[0], got[1], got[2], got[3], want)
				}
				gotCodes := codes(c.Findings())
				if tc.finding != "" && !slices.Contains(gotCodes, tc.finding) {
					t.Errorf("%v: findings %v, want %s", c, gotCodes, tc.finding)
				}
				if tc.finding == "" && slices.Contains(gotCodes, "CG002") {
					t.Errorf("%v: findings %v, want no CG002", c, gotCodes)
				}
				// Neither order has an attempt timeout inside the breaker.
				if !slices.Contains(gotCodes, "CG009") {
					t.Errorf("%v: findings %v, want CG009", c, gotCodes)
				}
			})
		})
	}
}
