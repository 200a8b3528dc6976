package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
)

// TestProbeCountRealServer reproduces SEEDS A's probe table over real
// sockets and real time: 20 concurrent callers against a loopback HTTP
// server that answers 503 until the breaker has opened three times. Each
// failed half-open round sends N probes to a downstream that is still down,
// so the failed probes are 2N (fewer only if callers arrive late).
func TestProbeCountRealServer(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time test")
	}
	for _, n := range []int{1, 3, 10} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			var healthy atomic.Bool
			var received, failedAtServer atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				received.Add(1)
				if healthy.Load() {
					return
				}
				failedAtServer.Add(1)
				time.Sleep(20 * time.Millisecond) // a slow failure: every probe is in flight before the first fails
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			defer srv.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 20}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}

			var mu sync.Mutex
			var opens, halfOpens int
			recovered := make(chan struct{})
			b, err := breaker.New(breaker.Settings{
				ConsecutiveFailures: 5,
				HalfOpenProbes:      n,
				OpenTimeout:         150 * time.Millisecond,
				OnStateChange: func(from, to breaker.State) {
					mu.Lock()
					defer mu.Unlock()
					switch {
					case to == breaker.StateOpen:
						opens++
						if opens == 3 {
							healthy.Store(true)
						}
					case to == breaker.StateHalfOpen:
						halfOpens++
					case to == breaker.StateClosed && halfOpens > 0:
						close(recovered)
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			errStatus := errors.New("5xx")
			get := func(ctx context.Context) error {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				if err != nil {
					return err
				}
				resp, err := client.Do(req)
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode >= 500 {
					return errStatus
				}
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			var transportErrors atomic.Int64
			for range 20 {
				wg.Go(func() {
					for {
						select {
						case <-recovered:
							return
						case <-ctx.Done():
							return
						default:
						}
						err := b.Do(ctx, get)
						switch {
						case errors.Is(err, breaker.ErrOpen):
							time.Sleep(2 * time.Millisecond)
						case err != nil && !errors.Is(err, errStatus) && ctx.Err() == nil:
							transportErrors.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if ctx.Err() != nil {
				t.Fatal("the breaker did not recover within 10 s")
			}
			c := b.Counts()
			t.Logf("N=%d: opens %d, half-opens %d, requests at server %d, failed probes %d, rejected open %d, quota %d",
				n, opens, halfOpens, received.Load(), c.ProbeFailures, c.RejectedOpen, c.RejectedProbes)
			if opens != 3 || halfOpens != 3 {
				t.Errorf("opens %d, half-opens %d; want 3, 3", opens, halfOpens)
			}
			// Two failed rounds of N probes: 2N, fewer only if callers arrived
			// after the first failure of a round; more than N means both
			// rounds sent probes beyond the first.
			if c.ProbeFailures <= uint64(n) || c.ProbeFailures > uint64(2*n) {
				t.Errorf("failed probes %d, want 2N = %d (more than N = %d, for late callers)", c.ProbeFailures, 2*n, n)
			}
			if transportErrors.Load() != 0 {
				t.Errorf("%d connection errors, want 0", transportErrors.Load())
			}
			if c.Successes+c.Failures+c.Neutral != uint64(received.Load()) {
				t.Errorf("breaker admitted %d calls, server received %d", c.Successes+c.Failures+c.Neutral, received.Load())
			}
		})
	}
}
