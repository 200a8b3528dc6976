package httpmw_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/internal/attempt"
	"github.com/callguard/callguard/timeout"
)

// TestPoolWaitUnderHoistingHedge: the judge of a wait in the client's own
// pool reads the attempt's own deadline, and a hedge that makes the
// attempts' contexts with the attempt timeout inside the breaker (hoisted)
// gives it the same one; the chain leaves the judge's mark alone (an
// attempt cut in the pool stays neutral, not the downstream's failure).
// TestPoolWaitIsNotAFailure's case behind a hedge that never fires: the
// breaker stays closed, rejects nothing.
func TestPoolWaitUnderHoistingHedge(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(30 * time.Millisecond):
			_, _ = io.WriteString(w, "ok")
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	base := &http.Transport{MaxConnsPerHost: 1}
	defer base.CloseIdleConnections()
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 5}))
	h := must(hedge.New(hedge.Settings{Delay: time.Hour}))
	client := &http.Client{Transport: must(httpmw.New(base, must(chain.New(h, b, must(timeout.New(50*time.Millisecond))))))}
	var mu sync.Mutex
	var ok, queued, rejected, other int
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			req := must(http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil))
			resp, err := client.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && resp.Header.Get(httpmw.BreakerHeader) == "":
				ok++
			case errors.As(err, new(*attempt.Queued)):
				queued++
			case errors.Is(err, breaker.ErrOpen):
				rejected++
			default:
				other++
			}
		})
	}
	wg.Wait()
	t.Logf("%d answered, %d cut waiting for the connection, %d rejected by the breaker, %d other", ok, queued, rejected, other)
	if rejected != 0 || b.State() != breaker.StateClosed || ok == 0 || queued == 0 {
		t.Errorf("%d answered, %d cut in the pool, %d rejected by the breaker, breaker %v; want none rejected and it closed", ok, queued, rejected, b.State())
	}
}
