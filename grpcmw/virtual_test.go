package grpcmw_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/retry"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestSeedC3VirtualTime runs SEEDS C3 over gRPC on a bufconn listener in
// virtual time: with the breaker open, RetryWhenOpen makes the caller wait
// exactly the 125 ms + 250 ms of backoff; the default fails at once. A
// caller canceling during a wait gets its error at once.
func TestSeedC3VirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.NewGRPCBufconn(always(codes.Unavailable))
		defer srv.Stop()
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
		for _, whenOpen := range []bool{false, true} {
			opts := []retry.Option{retry.MaxAttempts(3), retry.Exponential(125*time.Millisecond, time.Second), retry.Jitter(0)}
			if whenOpen {
				opts = append(opts, retry.RetryWhenOpen())
			}
			c := must(chain.New(must(retry.New(opts...)), b))
			conn := must(srv.Dial(must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).DialOptions()...))
			client := healthpb.NewHealthClient(conn)
			// Opens the breaker. With RetryWhenOpen the retry would wait out the
			// hour of the open stay: the caller's deadline makes it give up at once.
			opening, cancelOpening := context.WithTimeout(context.Background(), time.Second)
			_ = check(opening, client)
			cancelOpening()
			start := time.Now()
			err := check(context.Background(), client)
			want := time.Duration(0)
			if whenOpen {
				want = 375 * time.Millisecond
			}
			if got := time.Since(start); got != want || status.Code(err) != codes.Unavailable || !errors.Is(err, breaker.ErrOpen) {
				t.Errorf("RetryWhenOpen=%t: %v after %v; want Unavailable/ErrOpen after exactly %v", whenOpen, err, got, want)
			}
			if whenOpen {
				ctx, cancel := context.WithCancel(context.Background())
				go func() { time.Sleep(50 * time.Millisecond); cancel() }()
				start = time.Now()
				err = check(ctx, client)
				if got := time.Since(start); got != 50*time.Millisecond || status.Code(err) != codes.Canceled {
					t.Errorf("canceled during a wait: %v after %v; want Canceled at 50ms", err, got)
				}
			}
			conn.Close()
		}
		if srv.Received.Load() != 1 {
			t.Errorf("server received %d calls, want 1", srv.Received.Load())
		}
	})
}
