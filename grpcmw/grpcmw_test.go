package grpcmw_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// server starts a real gRPC server on 127.0.0.1:0 answering every call with
// answer, and a client whose calls go through c.
func server(t *testing.T, answer func(n int64, method string) testserver.GRPCAnswer, opts ...grpc.DialOption) (*testserver.GRPC, healthpb.HealthClient) {
	t.Helper()
	srv, err := testserver.NewGRPC(answer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	conn, err := srv.Dial(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return srv, healthpb.NewHealthClient(conn)
}

func always(code codes.Code) func(int64, string) testserver.GRPCAnswer {
	return func(int64, string) testserver.GRPCAnswer { return testserver.GRPCAnswer{Code: code} }
}

func fiveConsecutive() *breaker.Breaker {
	return must(breaker.New(breaker.Settings{ConsecutiveFailures: 5, HalfOpenProbes: 3, OpenTimeout: time.Minute}))
}

func threeAttempts(opts ...retry.Option) *retry.Policy {
	return must(retry.New(append([]retry.Option{retry.MaxAttempts(3), retry.Constant(time.Millisecond), retry.Jitter(0)}, opts...)...))
}

func check(ctx context.Context, c healthpb.HealthClient, opts ...grpc.CallOption) error {
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
	return err
}

// TestSeedC1OverGRPC: the server always answers Unavailable; 12 requests
// with 3 attempts each; the server counts 15 calls with the retry inside the
// breaker and 5 with it outside.
func TestSeedC1OverGRPC(t *testing.T) {
	for _, tc := range []struct {
		name     string
		outside  bool
		received int64
	}{{"breaker wraps retry", false, 15}, {"retry wraps breaker", true, 5}} {
		t.Run(tc.name, func(t *testing.T) {
			b, r := fiveConsecutive(), threeAttempts()
			order := []chain.Policy{b, r}
			if tc.outside {
				order = []chain.Policy{r, b}
			}
			c := must(chain.New(order...))
			srv, client := server(t, always(codes.Unavailable), must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).DialOptions()...)
			for range 12 {
				err := check(context.Background(), client)
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("got %v, want Unavailable", err)
				}
			}
			if got := srv.Received.Load(); got != tc.received {
				t.Errorf("server received %d calls, want %d", got, tc.received)
			}
		})
	}
}

// TestSeedC3OverGRPC: with the breaker open, the default fails at once with
// codes.Unavailable matching breaker.ErrOpen; RetryWhenOpen waits its backoff.
func TestSeedC3OverGRPC(t *testing.T) {
	for _, whenOpen := range []bool{false, true} {
		var opts []retry.Option
		if whenOpen {
			opts = append(opts, retry.RetryWhenOpen())
		}
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
		r := must(retry.New(append([]retry.Option{retry.MaxAttempts(3), retry.Constant(100 * time.Millisecond), retry.Jitter(0)}, opts...)...))
		c := must(chain.New(r, b))
		srv, client := server(t, always(codes.Unavailable), must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).DialOptions()...)
		// Opens the breaker. With RetryWhenOpen the retry would wait out the
		// hour of the open stay: the caller's deadline makes it give up at once.
		opening, cancelOpening := context.WithTimeout(context.Background(), time.Second)
		_ = check(opening, client)
		cancelOpening()
		start := time.Now()
		err := check(context.Background(), client)
		took := time.Since(start)
		if status.Code(err) != codes.Unavailable || !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("got %v, want Unavailable matching ErrOpen", err)
		}
		if whenOpen && took < 200*time.Millisecond {
			t.Errorf("RetryWhenOpen: failed after %v, want the 200 ms of waits", took)
		}
		if !whenOpen && took > 50*time.Millisecond {
			t.Errorf("default: failed after %v, want at once", took)
		}
		if srv.Received.Load() != 1 {
			t.Errorf("server received %d calls, want 1", srv.Received.Load())
		}
	}
}

func TestClassification(t *testing.T) {
	for _, tc := range []struct {
		code     codes.Code
		received int64 // for 4 calls, 3 attempts each, retry outside the breaker
		state    breaker.State
	}{
		{codes.NotFound, 4, breaker.StateClosed},
		{codes.InvalidArgument, 4, breaker.StateClosed},
		{codes.PermissionDenied, 4, breaker.StateClosed},
		{codes.Internal, 2, breaker.StateOpen},    // a failure, not retried
		{codes.Unavailable, 2, breaker.StateOpen}, // retried, trips at 2
		{codes.DataLoss, 2, breaker.StateOpen},    // a failure, not retried
		{codes.ResourceExhausted, 2, breaker.StateOpen},
		{codes.DeadlineExceeded, 2, breaker.StateOpen}, // the server's: retried
		{codes.Unknown, 2, breaker.StateOpen},          // a failure, not retried
		{codes.Aborted, 2, breaker.StateOpen},          // a failure, not retried
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 2, OpenTimeout: time.Hour}))
			c := must(chain.New(threeAttempts(), b))
			srv, client := server(t, always(tc.code), must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).DialOptions()...)
			for range 4 {
				if err := check(context.Background(), client); status.Code(err) != tc.code && !errors.Is(err, breaker.ErrOpen) {
					t.Fatalf("got %v, want %v", err, tc.code)
				}
			}
			if srv.Received.Load() != tc.received || b.State() != tc.state {
				t.Errorf("server received %d, breaker %v; want %d, %v", srv.Received.Load(), b.State(), tc.received, tc.state)
			}
		})
	}
	// The caller's own cancellation never trips the breaker.
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1}))
	_, client := server(t, func(int64, string) testserver.GRPCAnswer { return testserver.GRPCAnswer{Hang: true} },
		must(grpcmw.NewInterceptors(must(chain.New(b)))).DialOptions()...)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := check(ctx, client); status.Code(err) != codes.DeadlineExceeded || b.State() != breaker.StateClosed {
		t.Errorf("got %v, breaker %v; want the caller's DeadlineExceeded and a closed breaker", err, b.State())
	}
}

func TestIdempotency(t *testing.T) {
	c := must(chain.New(threeAttempts(), must(breaker.New(breaker.Settings{ConsecutiveFailures: 100}))))
	srv, client := server(t, always(codes.Unavailable), must(grpcmw.NewInterceptors(c, grpcmw.Idempotent("/other.Service/Get"))).DialOptions()...)
	for _, tc := range []struct {
		opts []grpc.CallOption
		want int64
	}{
		{nil, 1}, // not declared idempotent: never retried
		{[]grpc.CallOption{grpcmw.WithIdempotency(true)}, 3},
		{[]grpc.CallOption{grpcmw.WithIdempotency(true), grpcmw.WithMaxAttempts(2)}, 2},
	} {
		before := srv.Received.Load()
		_ = check(context.Background(), client, tc.opts...)
		if got := srv.Received.Load() - before; got != tc.want {
			t.Errorf("%v: %d calls, want %d", tc.opts, got, tc.want)
		}
	}
}

func TestPushback(t *testing.T) {
	c := must(chain.New(must(retry.New(retry.MaxAttempts(3), retry.Constant(time.Millisecond)))))
	srv, client := server(t, func(n int64, _ string) testserver.GRPCAnswer {
		switch n {
		case 1:
			return testserver.GRPCAnswer{Code: codes.Unavailable, PushbackMs: "150"}
		case 3:
			return testserver.GRPCAnswer{Code: codes.Unavailable, PushbackMs: "-1"}
		}
		return testserver.GRPCAnswer{}
	}, must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).DialOptions()...)
	start := time.Now()
	if err := check(context.Background(), client); err != nil || time.Since(start) < 150*time.Millisecond {
		t.Errorf("got %v after %v; want success after the server's 150 ms pushback", err, time.Since(start))
	}
	if err := check(context.Background(), client); status.Code(err) != codes.Unavailable || srv.Received.Load() != 3 {
		t.Errorf("got %v with %d calls; want Unavailable at once on a negative pushback", err, srv.Received.Load())
	}
}

// TestServiceConfigRetryMultiplies: grpc-go's own retry runs beneath the
// interceptors; with both on, 3 × 3 calls reach the server. DialOptions
// disables grpc-go's.
func TestServiceConfigRetryMultiplies(t *testing.T) {
	const serviceConfig = `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	newChain := func() *chain.Chain { return must(chain.New(threeAttempts())) }
	srv, client := server(t, always(codes.Unavailable),
		grpc.WithDefaultServiceConfig(serviceConfig),
		grpc.WithChainUnaryInterceptor(must(grpcmw.NewInterceptors(newChain(), grpcmw.AllIdempotent(), grpcmw.UnaryOnly())).Unary()))
	_ = check(context.Background(), client)
	if got := srv.Received.Load(); got != 9 {
		t.Errorf("both retries on: %d calls, want 9", got)
	}
	srv2, client2 := server(t, always(codes.Unavailable),
		append([]grpc.DialOption{grpc.WithDefaultServiceConfig(serviceConfig)}, must(grpcmw.NewInterceptors(newChain(), grpcmw.AllIdempotent())).DialOptions()...)...)
	_ = check(context.Background(), client2)
	if got := srv2.Received.Load(); got != 3 {
		t.Errorf("with DialOptions: %d calls, want 3", got)
	}
}

func TestPerMethodBreakers(t *testing.T) {
	built := map[string]*breaker.Breaker{}
	srv, client := server(t, func(_ int64, method string) testserver.GRPCAnswer {
		if method == testserver.MethodCheck {
			return testserver.GRPCAnswer{Code: codes.Unavailable}
		}
		return testserver.GRPCAnswer{}
	}, must(grpcmw.NewInterceptors(nil, grpcmw.PerMethod(func(method string) (*chain.Chain, error) {
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
		built[method] = b
		return chain.New(b)
	}, 10))).DialOptions()...)
	_ = check(context.Background(), client)
	if err := check(context.Background(), client); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Check: got %v, want its own breaker open", err)
	}
	w, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Errorf("Watch: got %v, want a message: its breaker is its own", err)
	}
	for {
		if _, err := w.Recv(); err != nil {
			break
		}
	}
	if len(built) != 2 || built[testserver.MethodCheck].State() != breaker.StateOpen || built[testserver.MethodWatch].State() != breaker.StateClosed {
		t.Errorf("breakers %v", built)
	}
	_ = srv
}

func TestUnaryTimeoutIsDeadlineExceeded(t *testing.T) {
	c := must(chain.New(must(timeout.New(50 * time.Millisecond))))
	_, client := server(t, func(int64, string) testserver.GRPCAnswer { return testserver.GRPCAnswer{Hang: true} }, must(grpcmw.NewInterceptors(c)).DialOptions()...)
	err := check(context.Background(), client)
	if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, timeout.ErrTimeout) {
		t.Errorf("got %v, want DeadlineExceeded matching timeout.ErrTimeout", err)
	}
}

// TestStreamRetriedBeforeFirstMessage: a server-streaming call that fails
// with Unavailable before its first message is retried; one that fails
// after a message is not.
func TestStreamRetriedBeforeFirstMessage(t *testing.T) {
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 10}))
	c := must(chain.New(threeAttempts(), b, must(timeout.New(time.Second))))
	srv, client := server(t, func(n int64, _ string) testserver.GRPCAnswer {
		switch n {
		case 1, 2:
			return testserver.GRPCAnswer{Code: codes.Unavailable} // before any message
		case 4:
			return testserver.GRPCAnswer{Code: codes.Unavailable, FailAfter: 1}
		}
		return testserver.GRPCAnswer{}
	}, must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).DialOptions()...)
	recvAll := func() (int, error) {
		w, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			return 0, err
		}
		n := 0
		for {
			_, err := w.Recv()
			if err == io.EOF {
				return n, nil
			}
			if err != nil {
				return n, err
			}
			n++
		}
	}
	if n, err := recvAll(); err != nil || n != 3 || srv.Received.Load() != 3 {
		t.Errorf("got %d messages, %v, after %d calls; want 3 messages on the 3rd call", n, err, srv.Received.Load())
	}
	if n, err := recvAll(); status.Code(err) != codes.Unavailable || n != 1 || srv.Received.Load() != 4 {
		t.Errorf("got %d messages, %v, after %d calls; want Unavailable after 1 message, not retried", n, err, srv.Received.Load())
	}
	c2 := b.Counts()
	// Outcomes the breaker learned: 2 failed attempts, 1 stream that ended
	// well, 1 stream that failed after its first message.
	if c2.Failures != 3 || c2.Successes != 1 {
		t.Errorf("breaker counts %+v, want 3 failures and 1 success", c2)
	}
}

// TestStreamFirstMessageTimeout: with FirstMessageTimeout, a stream whose
// first message does not come in time is a failure, and it is retried.
func TestStreamFirstMessageTimeout(t *testing.T) {
	c := must(chain.New(threeAttempts()))
	srv, client := server(t, func(n int64, _ string) testserver.GRPCAnswer {
		if n == 1 {
			return testserver.GRPCAnswer{Hang: true}
		}
		return testserver.GRPCAnswer{Messages: 2}
	}, must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent(), grpcmw.FirstMessageTimeout(100*time.Millisecond))).DialOptions()...)
	w, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := w.Recv(); err != nil {
			t.Fatalf("got %v, want the retried stream's messages", err)
		}
	}
	if _, err := w.Recv(); err != io.EOF || srv.Received.Load() != 2 {
		t.Errorf("got %v after %d calls; want EOF after 2 calls", err, srv.Received.Load())
	}
}

// TestClientStreamingOutcome: a client-streaming call reports its outcome
// to the breaker when its one response arrives: a successful probe closes a
// half-open breaker.
func TestClientStreamingOutcome(t *testing.T) {
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, HalfOpenProbes: 1, OpenTimeout: 50 * time.Millisecond}))
	var fail atomic.Bool
	fail.Store(true)
	srv, err := testserver.NewGRPC(func(int64, string) testserver.GRPCAnswer {
		if fail.Load() {
			return testserver.GRPCAnswer{Code: codes.Unavailable}
		}
		return testserver.GRPCAnswer{}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(b)))).DialOptions()...))
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)
	upload := func() (int32, error) {
		st, err := client.StreamingInputCall(context.Background())
		if err != nil {
			return 0, err
		}
		for range 3 {
			if err := st.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 10)}}); err != nil {
				break
			}
		}
		resp, err := st.CloseAndRecv()
		return resp.GetAggregatedPayloadSize(), err
	}
	if _, err := upload(); status.Code(err) != codes.Unavailable || b.State() != breaker.StateOpen {
		t.Fatalf("got %v, breaker %v; want Unavailable and open", err, b.State())
	}
	fail.Store(false)
	time.Sleep(60 * time.Millisecond)
	if n, err := upload(); err != nil || n != 30 {
		t.Fatalf("probe: %d, %v; want 30 bytes", n, err)
	}
	if b.State() != breaker.StateClosed {
		t.Errorf("breaker %v after a successful client-streaming probe, want closed", b.State())
	}
	if n, err := upload(); err != nil || n != 30 {
		t.Errorf("after closing: %d, %v", n, err)
	}
}

// TestBidiSendAndReceiveConcurrently: one goroutine sends while another
// receives large messages; flow control must not deadlock the stream.
func TestBidiSendAndReceiveConcurrently(t *testing.T) {
	c := must(chain.New(threeAttempts(), fiveConsecutive(), must(timeout.New(5*time.Second))))
	srv, err := testserver.NewGRPC(func(int64, string) testserver.GRPCAnswer { return testserver.GRPCAnswer{} })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	conn := must(srv.Dial(must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).DialOptions()...))
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := testpb.NewTestServiceClient(conn).FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	sendErr := make(chan error, 1)
	go func() {
		req := &testpb.StreamingOutputCallRequest{
			ResponseParameters: []*testpb.ResponseParameters{{Size: 256 << 10}},
			Payload:            &testpb.Payload{Body: make([]byte, 64<<10)},
		}
		for range n {
			if err := st.Send(req); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- st.CloseSend()
	}()
	got := 0
	for {
		_, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d responses: %v", got, err)
		}
		got++
	}
	if err := <-sendErr; err != nil || got != n {
		t.Errorf("sent: %v; received %d responses, want %d", err, got, n)
	}
}

// TestFallbackFillsReply: a fallback in the chain answers a unary call by
// filling its reply (grpcmw.Reply); streams, which a fallback cannot
// answer, refuse such a chain, at construction with NewInterceptors.
func TestFallbackFillsReply(t *testing.T) {
	fb := must(fallback.New(func(ctx context.Context, err error) error {
		r, ok := grpcmw.Reply(ctx).(*healthpb.HealthCheckResponse)
		if !ok {
			return err
		}
		r.Status = healthpb.HealthCheckResponse_NOT_SERVING
		return nil
	}, fallback.OnAnyFailure()))
	c := must(chain.New(fb, fiveConsecutive()))
	srv, client := server(t, always(codes.Unavailable), must(grpcmw.NewInterceptors(c, grpcmw.UnaryOnly())).DialOptions()...)
	resp, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING || srv.Received.Load() != 1 {
		t.Errorf("got %v, %v after %d calls; want the fallback's NOT_SERVING after 1", resp.GetStatus(), err, srv.Received.Load())
	}
	if _, err := grpcmw.NewInterceptors(c); err == nil || !strings.Contains(err.Error(), "UnaryOnly") || !strings.Contains(err.Error(), "fallback") {
		t.Errorf("NewInterceptors: %v, want an error pointing to UnaryOnly", err)
	}
	if _, err := grpcmw.NewInterceptors(c, grpcmw.UnaryOnly()); err != nil {
		t.Errorf("NewInterceptors with UnaryOnly: %v", err)
	}
	if grpcmw.Reply(context.Background()) != nil {
		t.Error("Reply outside a call is not nil")
	}
}

// TestDeadlineShorterThanWait: a caller's deadline shorter than the next
// backoff wait ends the retries at once, with the last status.
func TestDeadlineShorterThanWait(t *testing.T) {
	c := must(chain.New(threeAttempts(retry.Constant(10 * time.Second))))
	srv, client := server(t, always(codes.Unavailable), must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).DialOptions()...)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := check(ctx, client)
	if status.Code(err) != codes.Unavailable || time.Since(start) > 100*time.Millisecond || srv.Received.Load() != 1 {
		t.Errorf("got %v after %v and %d calls; want Unavailable at once", err, time.Since(start), srv.Received.Load())
	}
}

// TestPerTargetBreakers: one breaker per connection target.
func TestPerTargetBreakers(t *testing.T) {
	bad := must(testserver.NewGRPC(always(codes.Unavailable)))
	defer bad.Stop()
	good := must(testserver.NewGRPC(always(codes.OK)))
	defer good.Stop()
	breakers := map[string]*breaker.Breaker{}
	var mu sync.Mutex
	opts := must(grpcmw.NewInterceptors(nil, grpcmw.PerTarget(func(target string) (*chain.Chain, error) {
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
		mu.Lock()
		breakers[target] = b
		mu.Unlock()
		return chain.New(b)
	}, 8))).DialOptions()
	badConn, goodConn := must(bad.Dial(opts...)), must(good.Dial(opts...))
	defer badConn.Close()
	defer goodConn.Close()
	_ = check(context.Background(), healthpb.NewHealthClient(badConn))
	if err := check(context.Background(), healthpb.NewHealthClient(badConn)); !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("bad target: %v, want its breaker open", err)
	}
	if err := check(context.Background(), healthpb.NewHealthClient(goodConn)); err != nil {
		t.Errorf("good target: %v, want OK: its breaker is its own", err)
	}
	if len(breakers) != 2 {
		t.Errorf("%d breakers, want 2", len(breakers))
	}
}

// TestCallOptionsPassedThrough: the caller's call options reach the invoker
// unchanged and in order, however many there are, with callguard's trailer
// option after them only when the call may be retried; the caller's own
// trailer is filled in, and the caller's slice is not touched.
func TestCallOptionsPassedThrough(t *testing.T) {
	c := must(chain.New(must(retry.New(retry.MaxAttempts(2)))))
	for _, idempotent := range []bool{false, true} {
		icpt := must(grpcmw.NewInterceptors(c, grpcmw.Idempotent("/s/Idem"), grpcmw.UnaryOnly())).Unary()
		method := "/s/Other"
		if idempotent {
			method = "/s/Idem"
		}
		for n := 0; n <= 6; n++ {
			var callerTrailer metadata.MD
			opts := []grpc.CallOption{grpc.Trailer(&callerTrailer)}
			for len(opts) < n+1 {
				opts = append(opts, grpc.WaitForReady(true))
			}
			orig := slices.Clone(opts)
			var got []grpc.CallOption
			err := icpt(context.Background(), method, nil, nil, nil, func(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
				got = opts
				return cannedInvoker(context.Background(), "", nil, nil, nil, opts...)
			}, opts...)
			wantLen := len(opts)
			if idempotent {
				wantLen++
			}
			switch {
			case err != nil:
				t.Fatal(err)
			case len(got) != wantLen || !slices.Equal(got[:len(opts)], opts):
				t.Errorf("idempotent %t, %d options: the invoker got %d options, want the caller's %d then %d more", idempotent, len(opts), len(got), len(opts), wantLen-len(opts))
			case !slices.Equal(opts, orig):
				t.Errorf("idempotent %t, %d options: the caller's slice was modified", idempotent, len(opts))
			case callerTrailer == nil:
				t.Errorf("idempotent %t, %d options: the caller's trailer was not filled in", idempotent, len(opts))
			}
		}
	}
}

// TestSuccessClassNotRetried: a status a Classify rates a Success is
// neither retried nor counted as a failure.
func TestSuccessClassNotRetried(t *testing.T) {
	c := must(chain.New(threeAttempts()))
	srv, client := server(t, always(codes.AlreadyExists), must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent(),
		grpcmw.Classify(func(code codes.Code) grpcmw.Class {
			if code == codes.AlreadyExists {
				return grpcmw.ClassSuccess
			}
			return grpcmw.DefaultClassify(code)
		}))).DialOptions()...)
	err := check(context.Background(), client)
	if status.Code(err) != codes.AlreadyExists || srv.Received.Load() != 1 {
		t.Errorf("got %v after %d calls; want AlreadyExists after 1", err, srv.Received.Load())
	}
}

// TestPushbackTooLongForADuration: a pushback past what a time.Duration
// holds is past any MaxPushback: no retry (it wrapped to 64 ns).
func TestPushbackTooLongForADuration(t *testing.T) {
	c := must(chain.New(threeAttempts()))
	srv, client := server(t, func(int64, string) testserver.GRPCAnswer {
		return testserver.GRPCAnswer{Code: codes.Unavailable, PushbackMs: "76480200929599801"}
	}, must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).DialOptions()...)
	err := check(context.Background(), client)
	if status.Code(err) != codes.Unavailable || srv.Received.Load() != 1 {
		t.Errorf("got %v after %d calls; want Unavailable from 1 call", err, srv.Received.Load())
	}
}

// TestInvalidOptionsNamed: an invalid option fails every call with an
// error naming it.
func TestInvalidOptionsNamed(t *testing.T) {
	build := func(string) (*chain.Chain, error) { return must(chain.New(threeAttempts())), nil }
	key := func(context.Context, string, *grpc.ClientConn) string { return "" }
	for name, o := range map[string]grpcmw.Option{
		"PerMethod":    grpcmw.PerMethod(build, 0),
		"PerTarget":    grpcmw.PerTarget(nil, 5),
		"PerKey":       grpcmw.PerKey(key, nil, 5),
		"Classify":     grpcmw.Classify(nil),
		"StreamBuffer": grpcmw.StreamBuffer(-1, 0),
		"Client":       grpcmw.Client(""),
		"Tracing":      grpcmw.Tracing(nil),
	} {
		if ic, err := grpcmw.NewInterceptors(nil, o); ic != nil || err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: NewInterceptors = %v, %v; want an error naming it", name, ic, err)
		}
	}
}
