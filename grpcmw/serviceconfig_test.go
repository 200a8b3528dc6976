package grpcmw_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/internal/testserver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// run makes calls (Check, or Watch with stream) one after another through
// a client of a new server answering answer, once with grpc-go's own
// retry given the service config, once through FromServiceConfig's
// interceptors; it returns, for each, the server's calls per client call
// and the client calls' codes.
func runBoth(t *testing.T, sc string, calls int, stream bool, answer func(int64, string) testserver.GRPCAnswer) (builtin, converted []string) {
	t.Helper()
	ic, err := grpcmw.FromServiceConfig(sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, way := range []struct {
		out  *[]string
		opts []grpc.DialOption
	}{
		{&builtin, []grpc.DialOption{grpc.WithDefaultServiceConfig(sc)}},
		{&converted, ic.DialOptions()},
	} {
		srv, client := server(t, answer, way.opts...)
		for range calls {
			before := srv.Received.Load()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var err error
			if stream {
				err = watch(ctx, client)
			} else {
				err = check(ctx, client)
			}
			cancel()
			*way.out = append(*way.out, fmt.Sprintf("%d×%v", srv.Received.Load()-before, status.Code(err)))
		}
	}
	return builtin, converted
}

// watch reads a Watch stream to its end.
func watch(ctx context.Context, c healthpb.HealthClient) error {
	return watchReq(ctx, c, &healthpb.HealthCheckRequest{})
}

// watchReq reads a Watch stream of req to its end.
func watchReq(ctx context.Context, c healthpb.HealthClient, req *healthpb.HealthCheckRequest) error {
	w, err := c.Watch(ctx, req)
	if err != nil {
		return err
	}
	for {
		if _, err := w.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func retryConfig(name, extra string, maxAttempts int, codes string) string {
	return `{"methodConfig": [{"name": [` + name + `],` + extra + `
		"retryPolicy": {"maxAttempts": ` + fmt.Sprint(maxAttempts) + `, "initialBackoff": "0.001s", "maxBackoff": "0.002s",
			"backoffMultiplier": 2, "retryableStatusCodes": [` + codes + `]}}]}`
}

const check_ = `{"service": "grpc.health.v1.Health", "method": "Check"}`

// TestFromServiceConfigLikeGRPC: each field of a retryPolicy, a timeout
// and retryThrottling, through grpc-go's own retry and through the
// converted chain, against the same server: the same calls reach the
// server, and the caller gets the same code.
func TestFromServiceConfigLikeGRPC(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sc     string
		calls  int
		stream bool
		answer func(int64, string) testserver.GRPCAnswer
		want   string // the server's calls and the code, per call
	}{
		{"maxAttempts", retryConfig(check_, "", 3, `"UNAVAILABLE"`), 1, false, always(codes.Unavailable), "[3×Unavailable]"},
		{"maxAttempts capped at 5", retryConfig(check_, "", 7, `"UNAVAILABLE"`), 1, false, always(codes.Unavailable), "[5×Unavailable]"},
		{"a code not retryable", retryConfig(check_, "", 3, `"UNAVAILABLE"`), 1, false, always(codes.Internal), "[1×Internal]"},
		{"retryableStatusCodes", retryConfig(check_, "", 3, `"UNAVAILABLE", "INTERNAL"`), 1, false, always(codes.Internal), "[3×Internal]"},
		{"codes as numbers", retryConfig(check_, "", 3, `14`), 1, false, always(codes.Unavailable), "[3×Unavailable]"},
		{"a retry that succeeds", retryConfig(check_, "", 3, `"UNAVAILABLE"`), 1, false, func(n int64, _ string) testserver.GRPCAnswer {
			if n < 3 {
				return testserver.GRPCAnswer{Code: codes.Unavailable}
			}
			return testserver.GRPCAnswer{}
		}, "[3×OK]"},
		{"a name with a method: not another method", retryConfig(check_, "", 3, `"UNAVAILABLE"`), 1, true, always(codes.Unavailable), "[1×Unavailable]"},
		{"a name with a service: every method", retryConfig(`{"service": "grpc.health.v1.Health"}`, "", 3, `"UNAVAILABLE"`), 1, true, always(codes.Unavailable), "[3×Unavailable]"},
		{"an empty name: every method", retryConfig(`{}`, "", 4, `"UNAVAILABLE"`), 1, true, always(codes.Unavailable), "[4×Unavailable]"},
		{"timeout", retryConfig(check_, `"timeout": "0.2s",`, 3, `"UNAVAILABLE"`), 1, false, func(int64, string) testserver.GRPCAnswer {
			return testserver.GRPCAnswer{Delay: time.Second}
		}, "[1×DeadlineExceeded]"},
		{"retryThrottling", `{"methodConfig": [{"name": [` + check_ + `], "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.001s",
			"maxBackoff": "0.001s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}],
			"retryThrottling": {"maxTokens": 4, "tokenRatio": 0.5}}`, 3, false, always(codes.Unavailable), "[2×Unavailable 1×Unavailable 1×Unavailable]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			builtin, converted := runBoth(t, tc.sc, tc.calls, tc.stream, tc.answer)
			if b, c := fmt.Sprint(builtin), fmt.Sprint(converted); b != tc.want || c != tc.want {
				t.Errorf("grpc-go's retry %s, the converted chain %s; want %s for both", b, c, tc.want)
			}
		})
	}
}

// TestFromServiceConfigWaits: initialBackoff 10 ms, backoffMultiplier 2,
// maxBackoff 20 ms, 5 attempts that all fail: grpc-go's waits are 10,
// 20, 20 and 20 ms, ± 20 % each, 70 ms a call. Over 20 calls, the
// converted chain's mean time per call is within 15 % (and 5 ms) of
// grpc-go's own, and no call of either waits much longer than 84 ms,
// the waits' upper bound.
func TestFromServiceConfigWaits(t *testing.T) {
	sc := `{"methodConfig": [{"name": [` + check_ + `], "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.01s",
		"maxBackoff": "0.02s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	ic, err := grpcmw.FromServiceConfig(sc)
	if err != nil {
		t.Fatal(err)
	}
	mean := map[string]time.Duration{}
	for _, way := range []struct {
		name string
		opts []grpc.DialOption
	}{
		{"grpc-go", []grpc.DialOption{grpc.WithDefaultServiceConfig(sc)}},
		{"converted", ic.DialOptions()},
	} {
		_, client := server(t, func(int64, string) testserver.GRPCAnswer { return testserver.GRPCAnswer{Code: codes.Unavailable} }, way.opts...)
		_ = check(context.Background(), client) // connected
		var sum time.Duration
		const calls = 20
		for range calls {
			start := time.Now()
			_ = check(context.Background(), client)
			took := time.Since(start)
			sum += took
			if took > 84*time.Millisecond+time.Second {
				t.Errorf("%s: a call took %v, the waits are at most 84 ms", way.name, took)
			}
		}
		mean[way.name] = sum / calls
	}
	g, c := mean["grpc-go"], mean["converted"]
	t.Logf("mean per call: grpc-go %v, converted %v (nominal waits 70 ms)", g, c)
	if d := (c - g).Abs(); d > g*15/100+5*time.Millisecond {
		t.Errorf("mean per call: grpc-go %v, converted %v: more than 15 %% apart", g, c)
	}
}

// TestFromServiceConfigErrors: what grpc-go would refuse, and what is not
// converted, is an error naming where it is.
func TestFromServiceConfigErrors(t *testing.T) {
	for _, tc := range []struct{ sc, want string }{
		{`{`, "not a service config"},
		{retryConfig(check_, "", 1, `"UNAVAILABLE"`), "methodConfig[0]: retryPolicy: maxAttempts 1"},
		{retryConfig(check_, "", 3, ``), "retryableStatusCodes"},
		{retryConfig(check_, "", 3, `"NOT_A_CODE"`), "not a service config"},
		{retryConfig(check_, `"timeout": "soon",`, 3, `"UNAVAILABLE"`), `timeout "soon"`},
		{`{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": [14]}}]}`, "initialBackoff"},
		{`{"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 2}}]}`, "methodConfig[0]: hedgingPolicy"},
		{`{"methodConfig": [{"name": [{}]}, {"name": [{}]}]}`, "methodConfig[1].name[0]"},
		{`{"methodConfig": [{"name": [{"method": "Check"}]}]}`, "without a service"},
		{`{"retryThrottling": {"maxTokens": 0, "tokenRatio": 1}}`, "retryThrottling"},
	} {
		if _, err := grpcmw.FromServiceConfig(tc.sc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.sc, err, tc.want)
		}
	}
	_, err := grpcmw.FromServiceConfig(`{}`, grpcmw.PerMethod(func(string) (*chain.Chain, error) { return chain.New() }, 10))
	if err == nil || !strings.Contains(err.Error(), "PerMethod") {
		t.Errorf("with PerMethod: %v, want an error naming it", err)
	}
}

// TestServiceConfigChains: the chains FromServiceConfig builds, one per
// methodConfig, with their names and retryable codes; each New builds
// new policies.
func TestServiceConfigChains(t *testing.T) {
	sc := `{"methodConfig": [
		{"name": [{"service": "a.B", "method": "C"}, {"service": "a.D"}], "timeout": "2s",
		 "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}},
		{"name": [{}], "timeout": "1s"}]}`
	cs, err := grpcmw.ServiceConfigChains(sc)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || fmt.Sprint(cs[0].Names) != "[/a.B/C /a.D/]" || fmt.Sprint(cs[1].Names) != "[]" {
		t.Fatalf("chains %+v", cs)
	}
	a, _ := cs[0].New(nil)
	b, _ := cs[0].New(nil)
	if a.String() != "timeout(2s) → retry(4)" || a.Policies()[1] == b.Policies()[1] {
		t.Errorf("New: %v and %v, want timeout(2s) → retry(4), new policies each time", a, b)
	}
	if !cs[0].Retryable(codes.Unavailable) || cs[0].Retryable(codes.Internal) || cs[1].Retryable(codes.Unavailable) {
		t.Error("Retryable: want UNAVAILABLE for the first, nothing for the second")
	}
	if _, err := grpcmw.ServiceConfigChains(retryConfig(check_, "", 1, `"UNAVAILABLE"`)); err == nil || !strings.Contains(err.Error(), "maxAttempts 1") {
		t.Errorf("maxAttempts 1: %v, want an error naming it", err)
	}
}
