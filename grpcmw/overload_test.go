package grpcmw_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// TestRejectedIsResourceExhausted: a bulkhead of one slot and no queue
// refuses a second call while the first runs: the caller gets
// ResourceExhausted, errors.Is(err, callguard.ErrRejected) holds, and the
// server sees one call.
func TestRejectedIsResourceExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.NewGRPCBufconn(func(int64, string) testserver.GRPCAnswer {
			return testserver.GRPCAnswer{Delay: 100 * time.Millisecond}
		})
		defer srv.Stop()
		bh := must(limit.NewBulkhead(limit.BulkheadSettings{MaxConcurrent: 1}))
		conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(bh)))).DialOptions()...))
		defer conn.Close()
		client := healthpb.NewHealthClient(conn)
		first := make(chan error)
		go func() { first <- check(context.Background(), client) }()
		time.Sleep(10 * time.Millisecond)
		err := check(context.Background(), client)
		if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, callguard.ErrRejected) || !errors.Is(err, limit.ErrLimited) {
			t.Errorf("second call: %v; want ResourceExhausted matching callguard.ErrRejected and limit.ErrLimited", err)
		}
		if err := <-first; err != nil {
			t.Errorf("first call: %v", err)
		}
		if n := srv.Received.Load(); n != 1 {
			t.Errorf("server saw %d calls; want 1", n)
		}
	})
}

// TestHedgedUnary: the server's first answer takes 1 s, the others 10 ms.
// An idempotent call hedged after 20 ms gets the hedge's reply at 30 ms;
// a call not declared idempotent is not hedged and waits the second.
func TestHedgedUnary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.NewGRPCBufconn(func(n int64, _ string) testserver.GRPCAnswer {
			if n == 1 || n == 3 {
				return testserver.GRPCAnswer{Delay: time.Second}
			}
			return testserver.GRPCAnswer{Delay: 10 * time.Millisecond}
		})
		defer srv.Stop()
		h := must(hedge.New(hedge.Settings{Delay: 20 * time.Millisecond}))
		c := must(chain.New(h, must(timeout.New(5*time.Second))))
		for _, idem := range []bool{true, false} {
			opts := []grpcmw.Option{grpcmw.UnaryOnly()} // streams cannot be hedged
			if idem {
				opts = append(opts, grpcmw.AllIdempotent())
			}
			conn := must(srv.Dial(must(grpcmw.NewInterceptors(c, opts...)).DialOptions()...))
			client := healthpb.NewHealthClient(conn)
			start := time.Now()
			resp, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
			want := 30 * time.Millisecond
			if !idem {
				want = time.Second
			}
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING || time.Since(start) != want {
				t.Errorf("idempotent %t: %v, %v after %v; want SERVING after %v", idem, resp, err, time.Since(start), want)
			}
			conn.Close()
		}
		if s := h.Stats(); s.Hedges != 1 || s.Wins != 1 {
			t.Errorf("hedge stats %+v; want 1 hedge, 1 win", s)
		}
	})
}

// TestStreamGates: a stream through a throttle and a bulkhead takes their
// permits for its attempt and gives them back at its end; a hedge on
// streams is refused at construction.
func TestStreamGates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.NewGRPCBufconn(always(codes.OK))
		defer srv.Stop()
		th := must(throttle.New(throttle.Settings{}))
		bh := must(limit.NewBulkhead(limit.BulkheadSettings{MaxConcurrent: 1}))
		conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(th, bh)))).DialOptions()...))
		defer conn.Close()
		client := healthpb.NewHealthClient(conn)
		for range 3 {
			st, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for {
				if _, err := st.Recv(); err != nil {
					break
				}
			}
			if bh.InFlight() != 0 {
				t.Errorf("bulkhead holds %d slots after the stream ended; want 0", bh.InFlight())
			}
		}
		if req, acc := th.Counts(); req != 3 || acc != 3 {
			t.Errorf("throttle counts %d requests, %d accepts; want 3 and 3", req, acc)
		}
		h := must(hedge.New(hedge.Settings{Delay: time.Millisecond}))
		if _, err := grpcmw.NewInterceptors(must(chain.New(h))); err == nil {
			t.Error("a hedge for streams was accepted; want an error at construction")
		}
	})
}

// TestOverloaded: a server's ResourceExhausted is an overload refusal;
// Unavailable and a local rejection are not.
func TestOverloaded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.NewGRPCBufconn(func(n int64, _ string) testserver.GRPCAnswer {
			if n == 1 {
				return testserver.GRPCAnswer{Code: codes.ResourceExhausted}
			}
			return testserver.GRPCAnswer{Code: codes.Unavailable}
		})
		defer srv.Stop()
		var excluded []bool
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, IsExcluded: func(err error) bool {
			excluded = append(excluded, grpcmw.Overloaded(err))
			return grpcmw.Overloaded(err)
		}}))
		conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(b)))).DialOptions()...))
		defer conn.Close()
		client := healthpb.NewHealthClient(conn)
		err := check(context.Background(), client)
		if !grpcmw.Overloaded(err) || b.State() != breaker.StateClosed {
			t.Errorf("ResourceExhausted: Overloaded %t, breaker %v; want true and closed (excluded)", grpcmw.Overloaded(err), b.State())
		}
		err = check(context.Background(), client)
		if grpcmw.Overloaded(err) || b.State() != breaker.StateOpen {
			t.Errorf("Unavailable: Overloaded %t, breaker %v; want false and open", grpcmw.Overloaded(err), b.State())
		}
		if len(excluded) != 2 || !excluded[0] || excluded[1] {
			t.Errorf("the breaker asked about %v; want [true false]", excluded)
		}
	})
}

// TestHedgedUnaryCallOptions: a hedge that wins gives the caller its
// peer (and header and trailer) through the caller's own call options;
// many hedged calls at once share nothing (run with -race).
func TestHedgedUnaryCallOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.NewGRPCBufconn(func(n int64, _ string) testserver.GRPCAnswer {
			if n%2 == 1 {
				return testserver.GRPCAnswer{Delay: time.Second}
			}
			return testserver.GRPCAnswer{Delay: 10 * time.Millisecond}
		})
		defer srv.Stop()
		h := must(hedge.New(hedge.Settings{Delay: 20 * time.Millisecond, Budget: 1, Burst: 100}))
		conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(h, must(timeout.New(5*time.Second)))), grpcmw.AllIdempotent(), grpcmw.UnaryOnly())).DialOptions()...))
		defer conn.Close()
		client := healthpb.NewHealthClient(conn)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var p peer.Peer
				var hd, tr metadata.MD
				resp, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.Header(&hd), grpc.Trailer(&tr))
				if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING || p.Addr == nil {
					t.Errorf("Check: %v, %v, peer %v; want SERVING and the peer set", resp, err, p.Addr)
				}
			}()
		}
		wg.Wait()
		if s := h.Stats(); s.Wins == 0 {
			t.Errorf("hedge stats %+v; want hedges that won", s)
		}
	})
}
