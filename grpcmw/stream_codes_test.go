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
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// hangingCreation is a streamer, beneath callguard's, that waits for its
// context to end, as grpc-go's does for a connection that is not ready
// under grpc.WaitForReady, and fails with the context's status.
func hangingCreation(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ grpc.Streamer, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// TestStreamTimeoutCodes: a stream whose attempts time out (its first
// message does not come within FirstMessageTimeout, or its creation does
// not end within the chain's attempt timeout), through retry → breaker →
// attempt timeout, fails with DeadlineExceeded matching timeout.ErrTimeout
// whether the retries run out or the breaker, opened by the timeouts, ends
// them (then matching breaker.ErrOpen too). A stream the open breaker
// rejects before any attempt fails with Unavailable; the caller's own
// deadline and cancellation give DeadlineExceeded and Canceled, at once. A
// Recv after the end gets the same code again.
func TestStreamTimeoutCodes(t *testing.T) {
	const (
		attemptTimeout = 100 * time.Millisecond
		backoff        = 10 * time.Millisecond
		callerEnd      = 150 * time.Millisecond // during the second attempt
	)
	callerDeadline := func(ctx context.Context) (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, callerEnd)
	}
	callerCancel := func(ctx context.Context) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(callerEnd, cancel)
		return ctx, cancel
	}
	for _, tc := range []struct {
		name     string
		failures int  // the breaker trips after this many consecutive failures
		before   int  // streams that time out before the one measured
		creation bool // the creation hangs, not the first message
		caller   func(context.Context) (context.Context, context.CancelFunc)
		code     codes.Code
		open     bool          // errors.Is(err, breaker.ErrOpen)
		timedOut bool          // errors.Is(err, timeout.ErrTimeout)
		took     time.Duration // from the stream's start
		calls    int64         // the server's, for the stream measured
	}{
		{name: "first message/retries run out", failures: 5,
			code: codes.DeadlineExceeded, timedOut: true, took: 3*attemptTimeout + 2*backoff, calls: 3},
		{name: "first message/breaker opens", failures: 2,
			code: codes.DeadlineExceeded, open: true, timedOut: true, took: 2*attemptTimeout + backoff, calls: 2},
		{name: "first message/breaker open before the first attempt", failures: 1, before: 1,
			code: codes.Unavailable, open: true},
		{name: "first message/caller's deadline", failures: 5,
			caller: callerDeadline, code: codes.DeadlineExceeded, took: callerEnd, calls: 2},
		{name: "first message/caller's cancel", failures: 5,
			caller: callerCancel, code: codes.Canceled, took: callerEnd, calls: 2},
		// A creation the chain's timeout cut is Unavailable: the attempt was
		// still waiting for a connection, and the caller's deadline has not
		// passed (a client library retries Unavailable; DeadlineExceeded
		// would end its stream for good).
		{name: "creation/retries run out", failures: 5, creation: true,
			code: codes.Unavailable, timedOut: true, took: 3*attemptTimeout + 2*backoff},
		{name: "creation/breaker opens", failures: 2, creation: true,
			code: codes.Unavailable, open: true, timedOut: true, took: 2*attemptTimeout + backoff},
		{name: "creation/breaker open before the first attempt", failures: 1, before: 1, creation: true,
			code: codes.Unavailable, open: true},
		{name: "creation/caller's deadline", failures: 5, creation: true,
			caller: callerDeadline, code: codes.DeadlineExceeded, took: callerEnd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := testserver.NewGRPCBufconn(func(int64, string) testserver.GRPCAnswer { return testserver.GRPCAnswer{Hang: true} })
				defer srv.Stop()
				r := must(retry.New(retry.MaxAttempts(3), retry.Constant(backoff), retry.Jitter(0)))
				b := must(breaker.New(breaker.Settings{ConsecutiveFailures: tc.failures, OpenTimeout: time.Hour}))
				c := must(chain.New(r, b, must(timeout.New(attemptTimeout))))
				ic := must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent(), grpcmw.FirstMessageTimeout(attemptTimeout)))
				opts := ic.DialOptions()
				if tc.creation {
					opts = append(opts, grpc.WithChainStreamInterceptor(hangingCreation))
				}
				conn := must(srv.Dial(opts...))
				defer conn.Close()
				client := healthpb.NewHealthClient(conn)
				watch := func(ctx context.Context) error {
					w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
					if err != nil {
						return err
					}
					_, err = w.Recv()
					if _, again := w.Recv(); status.Code(again) != status.Code(err) {
						t.Errorf("a Recv after the end: %v; want %v again", again, status.Code(err))
					}
					return err
				}
				for range tc.before {
					want := codes.DeadlineExceeded
					if tc.creation {
						want = codes.Unavailable
					}
					if err := watch(context.Background()); status.Code(err) != want {
						t.Fatalf("a stream before: %v; want %v", err, want)
					}
				}
				if s := b.State(); (s == breaker.StateOpen) != (tc.before > 0) {
					t.Fatalf("the breaker is %v before the stream measured", s)
				}
				ctx := context.Background()
				if tc.caller != nil {
					var cancel context.CancelFunc
					ctx, cancel = tc.caller(ctx)
					defer cancel()
				}
				received := srv.Received.Load()
				start := time.Now()
				err := watch(ctx)
				took, calls := time.Since(start), srv.Received.Load()-received
				if status.Code(err) != tc.code || errors.Is(err, breaker.ErrOpen) != tc.open || errors.Is(err, timeout.ErrTimeout) != tc.timedOut {
					t.Errorf("got %v (code %v, ErrOpen %t, ErrTimeout %t); want code %v, ErrOpen %t, ErrTimeout %t",
						err, status.Code(err), errors.Is(err, breaker.ErrOpen), errors.Is(err, timeout.ErrTimeout), tc.code, tc.open, tc.timedOut)
				}
				if took != tc.took || calls != tc.calls {
					t.Errorf("after %v and %d calls; want %v and %d calls", took, calls, tc.took, tc.calls)
				}
			})
		})
	}
}
