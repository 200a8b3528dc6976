package grpcmw_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestProbesWaitForReady: an attempt made while the breaker is half-open
// (a probe) carries grpc.WaitForReady(true), by default; other attempts,
// and every attempt with ProbesWaitForReady(false), carry the caller's
// options only, and so does a probe with no deadline at all. (The reconnect it pairs with, and what it changes after a
// restart, are measured in internal/reliability's TestKillAndRestart.)
func TestProbesWaitForReady(t *testing.T) {
	for _, on := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenProbes: 1}))
			ic := must(grpcmw.NewInterceptors(must(chain.New(b)), grpcmw.ProbesWaitForReady(on)))
			var waited []bool
			fail := true
			invoker := func(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
				w := false
				for _, o := range opts {
					if ff, ok := o.(grpc.FailFastCallOption); ok && !ff.FailFast {
						w = true
					}
				}
				waited = append(waited, w)
				if fail {
					return status.Error(codes.Unavailable, "down")
				}
				return nil
			}
			call := func() error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				return ic.Unary()(ctx, "/s/M", nil, nil, nil, invoker)
			}
			_ = call() // closed: fails, opens
			time.Sleep(time.Second + time.Millisecond)
			fail = false
			if err := call(); err != nil { // the probe
				t.Fatal(err)
			}
			_ = call() // closed again
			// A probe with no deadline does not wait.
			_ = b.ForceOpen()
			_ = b.Reset()
			fail = true
			_ = call()
			time.Sleep(time.Second + time.Millisecond)
			fail = false
			_ = ic.Unary()(context.Background(), "/s/M", nil, nil, nil, invoker)
			if len(waited) != 5 || waited[4] {
				t.Errorf("a probe with no deadline: waited for ready %v, want false", waited[4:])
			}
			waited = waited[:3]
			if want := []bool{false, on, false}; len(waited) != 3 || waited[0] != want[0] || waited[1] != want[1] || waited[2] != want[2] {
				t.Errorf("ProbesWaitForReady(%t): attempts waited for ready %v, want %v", on, waited, want)
			}
		})
	}
}

// TestStreamProbesWaitForReady: a stream created while its breaker is
// half-open, under a deadline, is created with WaitForReady, as a unary
// probe is; a stream created while it is closed is not.
func TestStreamProbesWaitForReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenProbes: 1}))
		ic := must(grpcmw.NewInterceptors(must(chain.New(b))))
		var waited []bool
		fail := true
		streamer := func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			w := false
			for _, o := range opts {
				if ff, ok := o.(grpc.FailFastCallOption); ok && !ff.FailFast {
					w = true
				}
			}
			waited = append(waited, w)
			if fail {
				return nil, status.Error(codes.Unavailable, "down")
			}
			return &fakeStream{ctx: ctx}, nil
		}
		open := func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = ic.Stream()(ctx, serverStreaming, nil, "/s/M", streamer)
		}
		open() // fails: opens
		time.Sleep(time.Second + time.Millisecond)
		fail = false
		open() // the probe
		if len(waited) != 2 || waited[0] || !waited[1] {
			t.Errorf("streams waited for ready %v, want [false true]", waited)
		}
	})
}
