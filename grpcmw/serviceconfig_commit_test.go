package grpcmw_test

import (
	"time"

	"testing"

	"github.com/callguard/callguard/internal/testserver"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// TestFromServiceConfigHeaderCommits: grpc-go commits a call once the
// server has sent its response's header (gRFC A6): a server that sends a
// header, then fails UNAVAILABLE, gets the call once, where a failure
// without a header (trailers only) is retried; a unary call or a stream.
func TestFromServiceConfigHeaderCommits(t *testing.T) {
	sc := retryConfig(check_, "", 4, `"UNAVAILABLE"`)
	withHeader := testserver.GRPCAnswer{Code: codes.Unavailable, Header: metadata.Pairs("x-answered", "1")}
	b, c := runPhases(t, sc, phase{calls: 1, answer: withHeader}, phase{calls: 1, answer: failing})
	sameAsGRPC(t, b, c, "1×Unavailable 4×Unavailable")
	b, c = runPhases(t, sc4all, phase{calls: 1, watch: true, answer: withHeader}, phase{calls: 1, watch: true, answer: failing})
	sameAsGRPC(t, b, c, "1×Unavailable 4×Unavailable")
}

// sc4all retries every method of the health service 4 times on
// UNAVAILABLE.
var sc4all = retryConfig(`{"service": "grpc.health.v1.Health"}`, "", 4, `"UNAVAILABLE"`)

// TestFromServiceConfigStreamTimeout: a methodConfig's timeout bounds the
// whole call, a stream's too: a Watch the server never ends is ended
// DEADLINE_EXCEEDED by a timeout of 0.3 s, long before the caller, whose
// deadline is 5 s, cancels it at 2 s (which would end it Canceled).
func TestFromServiceConfigStreamTimeout(t *testing.T) {
	sc := `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}], "timeout": "0.3s"}]}`
	never := testserver.GRPCAnswer{Hang: true}
	b, c := runPhases(t, sc, phase{calls: 1, watch: true, answer: never, timeout: 5 * time.Second, cancel: 2 * time.Second})
	sameAsGRPC(t, b, c, "1×DeadlineExceeded")
	// With a retryPolicy too.
	sc = retryConfig(`{"service": "grpc.health.v1.Health"}`, `"timeout": "0.3s",`, 3, `"UNAVAILABLE"`)
	b, c = runPhases(t, sc, phase{calls: 1, watch: true, answer: never, timeout: 5 * time.Second, cancel: 2 * time.Second})
	sameAsGRPC(t, b, c, "1×DeadlineExceeded")
}

// TestFromServiceConfigRetryBuffer: grpc-go keeps what a call sent, for a
// retry, up to 256 KiB (its retry buffer), and commits a call that sent
// more: a 300 KiB request failing UNAVAILABLE reaches the server once, a
// unary call or a stream, where one of 100 KiB is retried.
func TestFromServiceConfigRetryBuffer(t *testing.T) {
	for _, watch := range []bool{false, true} {
		b, c := runPhases(t, sc4all, phase{calls: 1, watch: watch, answer: failing, request: 300 << 10},
			phase{calls: 1, watch: watch, answer: failing, request: 100 << 10})
		sameAsGRPC(t, b, c, "1×Unavailable 4×Unavailable")
	}
}
