package grpcmw_test

import (
	"context"
	"errors"
	"github.com/callguard/callguard/chain"
	"google.golang.org/grpc/status"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/preset"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestStandard: the preset keeps a recommended chain per method, which
// retries a declared idempotent method and trips on a downstream that
// fails every call for the preset's DefaultConsecutiveFor; a bad setting is
// an error at construction.
func TestStandard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ic, err := grpcmw.Standard(preset.Settings{Backoff: time.Millisecond, MaxBackoff: time.Millisecond},
			grpcmw.Idempotent(healthpb.Health_Check_FullMethodName))
		if err != nil {
			t.Fatal(err)
		}
		srv := testserver.NewGRPCBufconn(always(codes.Unavailable))
		defer srv.Stop()
		conn := must(srv.Dial(ic.DialOptions()...))
		defer conn.Close()
		client := healthpb.NewHealthClient(conn)
		// A call every 100 ms, 3 attempts each: the run of failures
		// begins at 0 and is 10 long by 300 ms; the first failure from
		// 500 ms on opens the breaker: the first attempt of the sixth
		// call, the server's 16th.
		for range 8 {
			_ = check(context.Background(), client)
			time.Sleep(100 * time.Millisecond)
		}
		snaps := ic.Breakers()
		if len(snaps) != 1 || snaps[0].Key != healthpb.Health_Check_FullMethodName || snaps[0].State != breaker.StateOpen {
			t.Errorf("breakers %+v, want the Check method's, open", snaps)
		}
		if n := srv.Received.Load(); n != 16 {
			t.Errorf("the server received %d calls, want 16: 3 attempts a call until 10 in a row over 500ms trip the breaker", n)
		}
	})
	if _, err := grpcmw.Standard(preset.Settings{OpenTimeout: -time.Second}); err == nil || !strings.Contains(err.Error(), "OpenTimeout") {
		t.Errorf("Standard with OpenTimeout -1s: %v, want an error naming it", err)
	}
}

// TestRejectionCode: with RejectionCode, a call an open breaker refuses
// before any attempt carries the code given instead of Unavailable, still
// matching breaker.ErrOpen, and the server sees no call; without it,
// Unavailable.
func TestRejectionCode(t *testing.T) {
	for _, tc := range []struct {
		opts []grpcmw.Option
		want codes.Code
	}{
		{nil, codes.Unavailable},
		{[]grpcmw.Option{grpcmw.RejectionCode(codes.FailedPrecondition)}, codes.FailedPrecondition},
	} {
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 5}))
		b.ForceOpen()
		ic := must(grpcmw.NewInterceptors(must(chain.New(b)), tc.opts...))
		srv, client := server(t, func(int64, string) testserver.GRPCAnswer { return testserver.GRPCAnswer{} }, ic.DialOptions()...)
		err := check(context.Background(), client)
		if status.Code(err) != tc.want || !errors.Is(err, breaker.ErrOpen) || srv.Received.Load() != 0 {
			t.Errorf("%v: code %v, ErrOpen %t, %d calls received; want %v, ErrOpen, none", err, status.Code(err), errors.Is(err, breaker.ErrOpen), srv.Received.Load(), tc.want)
		}
		// A stream keeps Unavailable, which a library's watch loop
		// re-creates the stream on.
		_, err = client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
		if status.Code(err) != codes.Unavailable || !errors.Is(err, breaker.ErrOpen) {
			t.Errorf("a stream: %v (code %v), want Unavailable matching breaker.ErrOpen whatever RejectionCode says", err, status.Code(err))
		}
	}
	if _, err := grpcmw.NewInterceptors(nil, grpcmw.RejectionCode(codes.OK)); err == nil || !strings.Contains(err.Error(), "RejectionCode") {
		t.Errorf("RejectionCode(OK): %v, want an error naming it", err)
	}
}
