package grpcmw_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/internal/attempt"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// TestConnectingChannelOpensBreaker: a channel that cannot get a
// connection stays CONNECTING (for up to grpc-go's 20 s connect timeout)
// and grpc-go holds its calls there; 12 calls, a 3-consecutive breaker, a
// 50 ms attempt timeout, in virtual time. Making a connection is the
// downstream's time: with JudgeFromHeader as without it, the first 3
// attempts are failures and the 9 after them fail fast. Before, with
// JudgeFromHeader, no header ever went out and every attempt was judged
// the client's wait: 0 fail fast, 12 neutral, the breaker closed.
func TestConnectingChannelOpensBreaker(t *testing.T) {
	for _, target := range []struct {
		name string
		// dialer returns the channel's dialer, and what to close at the end.
		dialer func() (func(context.Context, string) (net.Conn, error), func())
	}{
		{"dial-hangs", func() (func(context.Context, string) (net.Conn, error), func()) {
			return func(ctx context.Context, _ string) (net.Conn, error) {
				<-ctx.Done() // a dropped SYN
				return nil, ctx.Err()
			}, func() {}
		}},
		{"no-handshake", func() (func(context.Context, string) (net.Conn, error), func()) {
			// A server that accepts and never sends its HTTP/2 settings.
			lis := bufconn.Listen(1 << 16)
			go func() {
				var conns []net.Conn
				defer func() {
					for _, c := range conns {
						c.Close()
					}
				}()
				for {
					c, err := lis.Accept()
					if err != nil {
						return
					}
					conns = append(conns, c)
				}
			}()
			return func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }, func() { lis.Close() }
		}},
	} {
		for _, judge := range []struct {
			name string
			opts []grpcmw.Option
		}{
			{"judged-whole", nil},
			{"JudgeFromHeader", []grpcmw.Option{grpcmw.JudgeFromHeader()}},
		} {
			t.Run(target.name+"/"+judge.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					dialer, closeTarget := target.dialer()
					defer closeTarget()
					b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: time.Hour}))
					ic := must(grpcmw.NewInterceptors(must(chain.New(b, must(timeout.New(50*time.Millisecond)))), append(judge.opts, grpcmw.AllIdempotent())...))
					conn := must(grpc.NewClient("passthrough:///unreachable", append(ic.DialOptions(),
						grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer))...))
					defer conn.Close()
					client := healthpb.NewHealthClient(conn)
					var failed, fast, queued, other int
					for range 12 {
						err := check(context.Background(), client)
						switch {
						case errors.Is(err, breaker.ErrOpen):
							fast++
						case errors.As(err, new(*attempt.Queued)):
							queued++
						case status.Code(err) == codes.DeadlineExceeded:
							failed++
						default:
							other++
							t.Logf("unexpected: %v", err)
						}
					}
					if failed != 3 || fast != 9 || b.State() != breaker.StateOpen {
						t.Errorf("%d failures, %d fail fast, %d judged the client's wait, %d other, breaker %v; want 3, 9, 0, 0, open", failed, fast, queued, other, b.State())
					}
				})
			})
		}
	}
}

// TestSlowConnectIsTheDownstreams: with JudgeFromHeader, a call on a new
// channel whose dial takes 40 ms, to a server that hangs, with a 50 ms
// attempt timeout, in virtual time: its 40 ms waiting for the connection
// (grpc-go's pick, until DelayedPickComplete) and its 10 ms after the
// header went out are all the downstream's time: a failure, which opens
// a 1-failure breaker. Judged from the header alone (10 ms of 50), it was
// the client's wait.
func TestSlowConnectIsTheDownstreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lis := bufconn.Listen(1 << 16)
		srv := grpc.NewServer()
		healthpb.RegisterHealthServer(srv, hangingHealth{})
		go func() { _ = srv.Serve(lis) }()
		defer srv.Stop()
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
		ic := must(grpcmw.NewInterceptors(must(chain.New(b, must(timeout.New(50*time.Millisecond)))), grpcmw.AllIdempotent(), grpcmw.JudgeFromHeader()))
		conn := must(grpc.NewClient("passthrough:///slow", append(ic.DialOptions(),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
				time.Sleep(40 * time.Millisecond)
				return lis.DialContext(ctx)
			}))...))
		defer conn.Close()
		err := check(context.Background(), healthpb.NewHealthClient(conn))
		if errors.As(err, new(*attempt.Queued)) || status.Code(err) != codes.DeadlineExceeded || b.State() != breaker.StateOpen {
			t.Errorf("%v, breaker %v; want DeadlineExceeded, a failure: the breaker open", err, b.State())
		}
	})
}

// hangingHealth answers no Check until its caller gives up.
type hangingHealth struct {
	healthpb.UnimplementedHealthServer
}

func (hangingHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
