package grpcmw_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
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

// recvErr opens a Watch and returns the error of its first Recv.
func recvErr(client healthpb.HealthClient) error {
	w, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	_, err = w.Recv()
	return err
}

// TestOneBreakerPerTarget: with DialOptions and PerTarget, unary calls and
// streams to one target share one chain, so one breaker sees both (each
// interceptor built its own keyed set, and trips went unseen).
func TestOneBreakerPerTarget(t *testing.T) {
	var builds atomic.Int32
	build := func(string) (*chain.Chain, error) {
		builds.Add(1)
		return chain.New(must(breaker.New(breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: time.Hour})))
	}
	var ic *grpcmw.Interceptors
	for name, opts := range map[string]func() []grpc.DialOption{
		"DialOptions": func() []grpc.DialOption { return ic.DialOptions() },
		"Unary+Stream": func() []grpc.DialOption {
			return []grpc.DialOption{grpc.WithChainUnaryInterceptor(ic.Unary()), grpc.WithChainStreamInterceptor(ic.Stream())}
		},
	} {
		ic = must(grpcmw.NewInterceptors(nil, grpcmw.PerTarget(build, 10)))
		builds.Store(0)
		srv, client := server(t, always(codes.Unavailable), opts()...)
		_ = check(context.Background(), client)
		_ = check(context.Background(), client)
		_ = recvErr(client)
		err := check(context.Background(), client)
		if !errors.Is(err, breaker.ErrOpen) || srv.Received.Load() != 3 || builds.Load() != 1 {
			t.Errorf("%s: 4th call got %v after %d calls and %d chains built; want ErrOpen after 3 calls, one chain", name, err, srv.Received.Load(), builds.Load())
		}
		if list := ic.Breakers(); len(list) != 1 || list[0].State != breaker.StateOpen || list[0].Counts.Failures != 3 {
			t.Errorf("%s: Breakers() = %+v, want one open breaker with 3 failures", name, list)
		}
	}
}

// TestMethodNames: a method name not of the form "/package.Service/Method"
// is refused at construction (it matched no call, and nothing was retried).
func TestMethodNames(t *testing.T) {
	c := must(chain.New(threeAttempts()))
	for _, bad := range []string{"grpc.health.v1.Health/Check", "Check", "/grpc.health.v1.Health", "/grpc.health.v1.Health/", "//Check", "/a/b/c"} {
		if _, err := grpcmw.NewInterceptors(c, grpcmw.Idempotent(bad)); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("Idempotent(%q): %v, want an error naming it", bad, err)
		}
	}
	if _, err := grpcmw.NewInterceptors(c, grpcmw.Idempotent(healthpb.Health_Check_FullMethodName)); err != nil {
		t.Errorf("Idempotent(%q): %v", healthpb.Health_Check_FullMethodName, err)
	}
}

// TestServerResourceExhausted: a server's own ResourceExhausted counts as a
// failure whatever its message says (one saying "larger than max" was
// taken for a client-side size limit and never counted), and is retried
// only with the server's pushback.
func TestServerResourceExhausted(t *testing.T) {
	for _, tc := range []struct {
		msg, pushback string
		calls         int64
	}{
		{"queue length larger than max", "", 2},
		{"quota exceeded", "", 2},
		{"queue length larger than max", "1", 6},
	} {
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 6, OpenTimeout: time.Hour}))
		srv, client := server(t, func(int64, string) testserver.GRPCAnswer {
			return testserver.GRPCAnswer{Code: codes.ResourceExhausted, Message: tc.msg, PushbackMs: tc.pushback}
		}, must(grpcmw.NewInterceptors(must(chain.New(threeAttempts(), b)), grpcmw.AllIdempotent())).DialOptions()...)
		_ = check(context.Background(), client)
		_ = check(context.Background(), client)
		if cn := b.Counts(); srv.Received.Load() != tc.calls || cn.Failures != uint64(tc.calls) {
			t.Errorf("%q, pushback %q: %d calls, breaker %+v; want %d calls, all failures", tc.msg, tc.pushback, srv.Received.Load(), cn, tc.calls)
		}
	}
}

// TestUnmarshalableRequest: a request grpc-go cannot marshal (Internal,
// raised on the client) is neutral and not retried.
func TestUnmarshalableRequest(t *testing.T) {
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1}))
	srv, client := server(t, always(codes.OK), must(grpcmw.NewInterceptors(must(chain.New(threeAttempts(), b)), grpcmw.AllIdempotent())).DialOptions()...)
	_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "\xff"})
	if status.Code(err) != codes.Internal || srv.Received.Load() != 0 {
		t.Fatalf("got %v after %d calls; want Internal, none sent", err, srv.Received.Load())
	}
	if cn := b.Counts(); cn.Neutral != 1 || cn.Failures != 0 {
		t.Errorf("breaker %+v; want 1 neutral call", cn)
	}
}

// opaque is a policy of the user's own.
type opaque struct{}

func (opaque) Do(ctx context.Context, call func(context.Context) error) error { return call(ctx) }

// TestStreamsApplyNestedChains: a breaker in a nested chain applies to
// streams (it was skipped, and failed streams went uncounted); a policy a
// stream cannot apply is refused by NewInterceptors, and through
// DialOptions fails the streams while unary calls run.
func TestStreamsApplyNestedChains(t *testing.T) {
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 5}))
	c := must(chain.New(threeAttempts(), must(chain.New(b))))
	srv, client := server(t, always(codes.Unavailable), must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).DialOptions()...)
	if err := recvErr(client); status.Code(err) != codes.Unavailable || srv.Received.Load() != 3 {
		t.Fatalf("got %v after %d calls; want Unavailable after 3", err, srv.Received.Load())
	}
	if cn := b.Counts(); cn.Failures != 3 {
		t.Errorf("nested breaker %+v, want 3 failures", cn)
	}

	withOwn := must(chain.New(opaque{}, must(breaker.New(breaker.Settings{}))))
	if _, err := grpcmw.NewInterceptors(withOwn); err == nil || !strings.Contains(err.Error(), "grpcmw_test.opaque") || !strings.Contains(err.Error(), "#1") {
		t.Errorf("NewInterceptors: %v, want an error naming policy #1, grpcmw_test.opaque", err)
	}
	_, client2 := server(t, always(codes.OK), must(grpcmw.NewInterceptors(withOwn, grpcmw.UnaryOnly())).DialOptions()...)
	if err := check(context.Background(), client2); err != nil {
		t.Errorf("unary, with UnaryOnly: %v", err)
	}
}

// TestLastAnswer: when an open breaker ends the retries after the server
// answered, the caller gets the server's last status (as an HTTP caller
// gets the last response), and errors.Is(err, breaker.ErrOpen) holds; a
// call rejected before any attempt gets the breaker's Unavailable.
func TestLastAnswer(t *testing.T) {
	b := must(breaker.New(breaker.Settings{Name: "catalog", ConsecutiveFailures: 2, OpenTimeout: time.Hour}))
	srv, client := server(t, func(int64, string) testserver.GRPCAnswer {
		return testserver.GRPCAnswer{Code: codes.Unavailable, Message: "the server's own words"}
	}, must(grpcmw.NewInterceptors(must(chain.New(threeAttempts(), b)), grpcmw.AllIdempotent())).DialOptions()...)
	err := check(context.Background(), client)
	var ex *retry.ExhaustedError
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "the server's own words" || !errors.Is(err, breaker.ErrOpen) ||
		!errors.As(err, &ex) || ex.Reason != retry.ReasonOpen || srv.Received.Load() != 2 {
		t.Errorf("got %v (%v) after %d calls; want the server's Unavailable, matching ErrOpen, after 2", err, ex, srv.Received.Load())
	}
	err = check(context.Background(), client)
	if st := status.Convert(err); st.Code() != codes.Unavailable || !errors.Is(err, breaker.ErrOpen) || srv.Received.Load() != 2 {
		t.Errorf("rejected: got %v after %d calls; want Unavailable matching ErrOpen, no call", err, srv.Received.Load())
	}
}

// TestImpatientCallersOverGRPC: with per-call deadlines (80 ms) below the
// attempt timeout (100 ms), a hung server still opens the breaker; a
// healthy one (10 ms) never does.
func TestImpatientCallersOverGRPC(t *testing.T) {
	for _, tc := range []struct {
		answer testserver.GRPCAnswer
		want   breaker.State
	}{{testserver.GRPCAnswer{Hang: true}, breaker.StateOpen}, {testserver.GRPCAnswer{Delay: 10 * time.Millisecond}, breaker.StateClosed}} {
		synctest.Test(t, func(t *testing.T) {
			srv := testserver.NewGRPCBufconn(func(int64, string) testserver.GRPCAnswer { return tc.answer })
			defer srv.Stop()
			b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: time.Minute}))
			c := must(chain.New(threeAttempts(), b, must(timeout.New(100*time.Millisecond))))
			conn := must(srv.Dial(must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).DialOptions()...))
			defer conn.Close()
			client := healthpb.NewHealthClient(conn)
			for range 6 {
				ctx, cancel := context.WithTimeout(context.Background(), 80*time.Millisecond)
				_ = check(ctx, client)
				cancel()
			}
			if b.State() != tc.want {
				t.Errorf("%+v: breaker %v %+v, want %v", tc.answer, b.State(), b.Counts(), tc.want)
			}
		})
	}
}

// TestKeyedStateChangesOverGRPC: OnStateChange gets the key (here the
// method) of the breaker that changed.
func TestKeyedStateChangesOverGRPC(t *testing.T) {
	var got []breaker.StateChange
	ic := must(grpcmw.NewInterceptors(nil,
		grpcmw.PerMethod(func(string) (*chain.Chain, error) {
			return chain.New(must(breaker.New(breaker.Settings{ConsecutiveFailures: 1})))
		}, 10),
		grpcmw.OnStateChange(func(c breaker.StateChange) { got = append(got, c) })))
	_, client := server(t, always(codes.Unavailable), ic.DialOptions()...)
	_ = check(context.Background(), client)
	_ = recvErr(client)
	keys := []string{}
	for _, c := range got {
		keys = append(keys, c.Key+":"+c.To.String())
	}
	slices.Sort(keys)
	if want := []string{healthpb.Health_Check_FullMethodName + ":open", healthpb.Health_Watch_FullMethodName + ":open"}; !slices.Equal(keys, want) {
		t.Errorf("state changes %v, want %v", keys, want)
	}
}

// TestZeroInterceptors: zero Interceptors fail every call with an error
// that says so, instead of panicking.
func TestZeroInterceptors(t *testing.T) {
	for _, ic := range []*grpcmw.Interceptors{nil, {}} {
		_, client := server(t, always(codes.OK), ic.DialOptions()...)
		if err := check(context.Background(), client); err == nil || !strings.Contains(err.Error(), "NewInterceptors") {
			t.Errorf("%#v: unary call got %v, want an error pointing to NewInterceptors", ic, err)
		}
		if err := recvErr(client); err == nil || !strings.Contains(err.Error(), "NewInterceptors") {
			t.Errorf("%#v: stream got %v, want an error pointing to NewInterceptors", ic, err)
		}
		if ic.Breakers() != nil {
			t.Errorf("%#v: Breakers() = %v, want none", ic, ic.Breakers())
		}
	}
}
