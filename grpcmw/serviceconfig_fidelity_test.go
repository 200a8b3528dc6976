package grpcmw_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/internal/testserver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// phase is a run of calls of one method (Check, or Watch, a stream) while
// the server answers every call with answer.
type phase struct {
	calls   int
	watch   bool
	answer  testserver.GRPCAnswer
	timeout time.Duration // each call's (0: 10 s)
	cancel  time.Duration // if not 0, the caller cancels each call after it
	request int           // if not 0, the request's size in bytes, about
}

// runPhases makes the phases' calls, one after another, through a client
// of a new server, once with grpc-go's own retry given the service
// config, once through FromServiceConfig's interceptors; it returns, for
// each, the server's calls and the code of each phase's last call, a
// phase at a time.
func runPhases(t *testing.T, sc string, phases ...phase) (builtin, converted string) {
	t.Helper()
	ic, err := grpcmw.FromServiceConfig(sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, way := range []struct {
		out  *string
		opts []grpc.DialOption
	}{
		{&builtin, []grpc.DialOption{grpc.WithDefaultServiceConfig(sc)}},
		{&converted, ic.DialOptions()},
	} {
		var cur atomic.Pointer[testserver.GRPCAnswer]
		srv, client := server(t, func(int64, string) testserver.GRPCAnswer { return *cur.Load() }, way.opts...)
		var out []string
		for _, p := range phases {
			cur.Store(&p.answer)
			before := srv.Received.Load()
			var err error
			for range p.calls {
				d := p.timeout
				if d == 0 {
					d = 10 * time.Second
				}
				ctx, cancel := context.WithTimeout(context.Background(), d)
				if p.cancel > 0 {
					time.AfterFunc(p.cancel, cancel)
				}
				req := &healthpb.HealthCheckRequest{Service: strings.Repeat("x", p.request)}
				if p.watch {
					err = watchReq(ctx, client, req)
				} else {
					_, err = client.Check(ctx, req)
				}
				cancel()
			}
			out = append(out, fmt.Sprintf("%d×%v", srv.Received.Load()-before, status.Code(err)))
		}
		*way.out = strings.Join(out, " ")
	}
	return builtin, converted
}

func sameAsGRPC(t *testing.T, builtin, converted, want string) {
	t.Helper()
	if builtin != want || converted != want {
		t.Errorf("grpc-go's retry %s,\nthe converted chain %s;\nwant %s for both", builtin, converted, want)
	}
}

var (
	failing = testserver.GRPCAnswer{Code: codes.Unavailable}
	fine    = testserver.GRPCAnswer{}
)

// TestFromServiceConfigThrottleRefills: an outage drains the throttle;
// then successful calls, answered at their first attempt, refill it, for
// grpc-go as for the chain (a unary call's success and a stream's), and
// the next failure is retried again.
func TestFromServiceConfigThrottleRefills(t *testing.T) {
	sc := `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}], "retryPolicy": {"maxAttempts": 2,
		"initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}],
		"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.5}}`
	for _, watch := range []bool{false, true} {
		b, c := runPhases(t, sc, phase{calls: 10, answer: failing}, phase{calls: 20, watch: watch, answer: fine}, phase{calls: 1, answer: failing})
		sameAsGRPC(t, b, c, "12×Unavailable 20×OK 2×Unavailable")
	}
}

// TestFromServiceConfigThrottlePerChannel: grpc-go's throttle is the
// connection's: a successful call of any method credits it, one with no
// methodConfig too (Watch here), so a method drained by its failures is
// retried again after them.
func TestFromServiceConfigThrottlePerChannel(t *testing.T) {
	sc := `{"methodConfig": [{"name": [` + check_ + `], "retryPolicy": {"maxAttempts": 3,
		"initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}],
		"retryThrottling": {"maxTokens": 10, "tokenRatio": 1}}`
	b, c := runPhases(t, sc, phase{calls: 4, answer: failing}, phase{calls: 10, watch: true, answer: fine}, phase{calls: 1, answer: failing})
	sameAsGRPC(t, b, c, "7×Unavailable 10×OK 3×Unavailable")
}

// TestFromServiceConfigLongPushback: grpc-go honours a pushback of any
// length, 31 s here: with a 2-minute deadline it waits, until the caller
// cancels; with a deadline before the pushback ends, the call ends
// DeadlineExceeded. It makes no retry for a trailer with several values.
func TestFromServiceConfigLongPushback(t *testing.T) {
	sc := retryConfig(check_, "", 3, `"UNAVAILABLE"`)
	long := testserver.GRPCAnswer{Code: codes.Unavailable, PushbackMs: "31000"}
	b, c := runPhases(t, sc, phase{calls: 1, answer: long, timeout: 2 * time.Minute, cancel: 300 * time.Millisecond})
	sameAsGRPC(t, b, c, "1×Canceled")
	b, c = runPhases(t, sc, phase{calls: 1, answer: long, timeout: 300 * time.Millisecond})
	sameAsGRPC(t, b, c, "1×DeadlineExceeded")
	several := testserver.GRPCAnswer{Code: codes.Unavailable, PushbackMs: "1,2"}
	b, c = runPhases(t, sc, phase{calls: 1, answer: several})
	sameAsGRPC(t, b, c, "1×Unavailable")
}

// TestFromServiceConfigShrinkingBackoff: initialBackoff 100 s, maxBackoff
// 1 s, backoffMultiplier 0.01: grpc-go waits min(100 s × 0.01ⁿ, 1 s)
// before retry n+1, 1 s, 1 s, then 10 ms (each ± 20 %): by a deadline of
// 1.5 s it has made 2 calls (the second wait ends at 1.6 s at the
// soonest), where the schedule clipped first (1 s, 10 ms, 0.1 ms) makes
// all 4.
func TestFromServiceConfigShrinkingBackoff(t *testing.T) {
	sc := `{"methodConfig": [{"name": [` + check_ + `], "retryPolicy": {"maxAttempts": 4,
		"initialBackoff": "100s", "maxBackoff": "1s", "backoffMultiplier": 0.01, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	b, c := runPhases(t, sc, phase{calls: 1, answer: failing, timeout: 1500 * time.Millisecond})
	sameAsGRPC(t, b, c, "2×DeadlineExceeded")
}
