package grpcmw_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// lateReturn is a policy that returns its call's result d after the call
// returned: what is outside it (a hedge) hears of an answer late.
type lateReturn struct{ d time.Duration }

func (l lateReturn) Do(ctx context.Context, call func(context.Context) error) error {
	err := call(ctx)
	time.Sleep(l.d)
	return err
}

// TestLateHedgeKeepsHeader: the first attempt answers at 9 ms, the hedge's
// delay ends at 10 ms, before the hedge hears of the answer (11 ms): the
// hedge is refused before it is sent, and the caller's header, trailer
// and peer are the first attempt's.
func TestLateHedgeKeepsHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.NewGRPCBufconn(func(n int64, _ string) testserver.GRPCAnswer {
			return testserver.GRPCAnswer{Delay: 9 * time.Millisecond, Header: metadata.Pairs("call", string(rune('0'+n)))}
		})
		defer srv.Stop()
		h := must(hedge.New(hedge.Settings{Delay: 10 * time.Millisecond}))
		c := must(chain.New(h, lateReturn{2 * time.Millisecond}, must(timeout.New(time.Second))))
		conn := must(srv.Dial(must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent(), grpcmw.UnaryOnly())).DialOptions()...))
		defer conn.Close()
		var hd metadata.MD
		var p peer.Peer
		resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&hd), grpc.Peer(&p))
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check: %v, %v; want SERVING", resp, err)
		}
		if got := hd.Get("call"); len(got) != 1 || got[0] != "1" || p.Addr == nil {
			t.Errorf("header call=%v, peer %v; want call=[1] and the peer set", got, p.Addr)
		}
		if n := srv.Received.Load(); n != 1 {
			t.Errorf("%d calls sent; want 1 (the late hedge refused before sending)", n)
		}
		if s := h.Stats(); s.Hedges != 0 {
			t.Errorf("hedge stats %+v; want 0 hedges", s)
		}
	})
}

// concurrently is a user's own policy that runs two copies of its call at
// once, as a hand-written hedger would, and returns the first's result.
type concurrently struct{}

func (concurrently) Do(ctx context.Context, call func(context.Context) error) error {
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = call(ctx)
		}()
	}
	wg.Wait()
	if errs[0] == nil || errs[1] == nil {
		return nil
	}
	return errs[0]
}

// TestNotIdempotentOnceUnderUserPolicy: a method not declared idempotent
// is sent once, even when a policy of the user's own (here wrapping a
// chain with a hedge, which the interceptor cannot see into) runs its
// attempts at once: the second is refused before it is sent.
func TestNotIdempotentOnceUnderUserPolicy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chain func() *chain.Chain
	}{
		{"a user's policy running two at once", func() *chain.Chain { return must(chain.New(concurrently{})) }},
		{"a hedge inside a user's policy", func() *chain.Chain {
			h := must(hedge.New(hedge.Settings{Delay: 5 * time.Millisecond}))
			return must(chain.New(wrapping{must(chain.New(h, must(timeout.New(time.Second))))}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := testserver.NewGRPCBufconn(func(int64, string) testserver.GRPCAnswer {
					return testserver.GRPCAnswer{Delay: 20 * time.Millisecond}
				})
				defer srv.Stop()
				conn := must(srv.Dial(must(grpcmw.NewInterceptors(tc.chain(), grpcmw.UnaryOnly())).DialOptions()...))
				defer conn.Close()
				resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
				if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
					t.Errorf("Check: %v, %v; want SERVING", resp, err)
				}
				if n := srv.Received.Load(); n != 1 {
					t.Errorf("a method not declared idempotent sent %d times; want once", n)
				}
			})
		})
	}
}

// wrapping is a user's policy that runs its call through a chain of its
// own.
type wrapping struct{ c *chain.Chain }

func (w wrapping) Do(ctx context.Context, call func(context.Context) error) error {
	return w.c.Do(ctx, call)
}
