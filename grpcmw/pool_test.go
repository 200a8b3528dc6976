package grpcmw_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/internal/attempt"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestStreamQuotaWaitIsNotAFailure: a server that allows one stream at a
// time (grpc.MaxConcurrentStreams(1)), 40 callers at once, a 50 ms
// attempt timeout and a healthy server answering in 30 ms. Most calls
// wait for stream quota in the client's own transport and their timeout
// cuts them there, or soon after their header went out: with
// JudgeFromHeader those are the client's waits (attempt.Queued), neutral
// to the breaker, which stays closed and rejects nothing (1 answered, 39
// cut in the client's queue). Without it, the breaker opens on the healthy
// server (the row "judged-whole": 1 answered, 39 timeouts, open).
func TestStreamQuotaWaitIsNotAFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []grpcmw.Option
		closed bool
	}{
		{"judged-whole", nil, false},
		{"JudgeFromHeader", []grpcmw.Option{grpcmw.JudgeFromHeader()}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := must(testserver.NewGRPCWith(func(int64, string) testserver.GRPCAnswer {
				return testserver.GRPCAnswer{Delay: 30 * time.Millisecond}
			}, grpc.MaxConcurrentStreams(1)))
			defer srv.Stop()
			b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 5}))
			c := must(chain.New(b, must(timeout.New(50*time.Millisecond))))
			ic := must(grpcmw.NewInterceptors(c, append(tc.opts, grpcmw.AllIdempotent())...))
			conn := must(srv.Dial(ic.DialOptions()...))
			defer conn.Close()
			client := healthpb.NewHealthClient(conn)
			// One call first: the connection is up and has the server's
			// SETTINGS (its stream limit) before the 40 start.
			if err := check(context.Background(), client); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var ok, queued, rejected, other int
			var wg sync.WaitGroup
			for range 40 {
				wg.Go(func() {
					err := check(context.Background(), client)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
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
			t.Logf("%d answered, %d cut waiting for stream quota, %d rejected by the breaker, %d other; breaker %v", ok, queued, rejected, other, b.State())
			if tc.closed && (rejected != 0 || b.State() != breaker.StateClosed || ok == 0 || queued == 0) {
				t.Errorf("want none rejected, some cut in the client's queue, the breaker closed")
			}
			if !tc.closed && b.State() != breaker.StateOpen {
				t.Errorf("judged whole, the client's waits count against the server: want the breaker open (the case JudgeFromHeader is for)")
			}
		})
	}
}
