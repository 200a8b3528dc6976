package reliability

import (
	"context"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// inFlight measures the memory of n calls held in flight at once: the
// server holds each until all have arrived (or, for HTTP, until the
// connection pool's worth has, the others waiting in the pool), then the
// heap's objects and the goroutine stacks in use are read, above what they
// were before the calls started, and the calls are released.
func inFlight(b *testing.B, n int, arrived func() int64, wantArrived int64, release func(), call func(ctx context.Context)) (heap, stacks float64) {
	runtime.GC()
	h0, s0 := memory()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			call(ctx)
		})
	}
	deadline := time.Now().Add(time.Minute)
	for arrived() < wantArrived && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the rest settle where they wait
	runtime.GC()
	h1, s1 := memory()
	release()
	wg.Wait()
	return float64(h1-h0) / (1 << 20), float64(s1-s0) / (1 << 20)
}

// BenchmarkInFlightMemory: the heap and goroutine stacks that 10,000
// calls in flight take, plain and through each adapter with the
// recommended chain (retry → breaker → attempt timeout), over loopback.
// ratio is callguard's total over plain's. Two more baselines say where
// the difference comes from: for gRPC, the plain client without grpc-go's
// own retry (which callguard's DialOptions turn off, and which keeps a
// buffer per call); for HTTP, the plain client behind one do-nothing
// RoundTripper whose frame takes 256 bytes of stack: the plain client's
// goroutine blocked in net/http sits just under a 4 KiB stack, and that
// wrapper, as callguard's chain (1,080 bytes: TestStackPerCall), has it
// copied to an 8 KiB stack. Heap and stacks are read at the peak, with
// every call in flight, after a collection: what is live, not garbage.
// Run with -benchtime 1x: one iteration is the whole measurement.
//
//	go test ./internal/reliability -run '^$' -bench InFlightMemory -benchtime 1x -count 5
func BenchmarkInFlightMemory(b *testing.B) {
	for _, proto := range []string{"grpc", "http"} {
		b.Run("proto="+proto, func(b *testing.B) {
			totals := map[string]float64{}
			impls := []string{"plain", "callguard", "plain-noretry"}
			if proto == "http" {
				impls[2] = "plain-wrapped"
			}
			for b.Loop() {
				for _, impl := range impls {
					heap, stacks := measureInFlight(b, proto, impl)
					b.ReportMetric(heap, impl+"-heap-MB")
					b.ReportMetric(stacks, impl+"-stacks-MB")
					totals[impl] = heap + stacks
				}
			}
			b.ReportMetric(totals["callguard"]/totals["plain"], "ratio")
			b.ReportMetric(totals["callguard"]/totals[impls[2]], "ratio-"+impls[2])
		})
	}
}

// measureInFlight runs one measurement of inFlight for proto and impl.
func measureInFlight(b *testing.B, proto, impl string) (heap, stacks float64) {
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	c := must(chain.New(
		must(retry.New(retry.MaxAttempts(3))),
		must(breaker.New(breaker.Settings{OpenTimeout: time.Second, HalfOpenSuccesses: 2})),
		must(timeout.New(30*time.Second, timeout.Latency(0.99, 10*time.Second))),
	))
	switch proto {
	case "grpc":
		srv := must(testserver.NewGRPC(func(int64, string) testserver.GRPCAnswer {
			<-gate
			return testserver.GRPCAnswer{}
		}))
		defer srv.Stop()
		var opts []grpc.DialOption
		switch impl {
		case "callguard":
			opts = must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).DialOptions()
		case "plain-noretry":
			opts = []grpc.DialOption{grpc.WithDisableRetry()}
		}
		conn := must(srv.Dial(opts...))
		defer conn.Close()
		client := healthpb.NewHealthClient(conn)
		return inFlight(b, concurrent, srv.Received.Load, concurrent, release, func(ctx context.Context) {
			_, _ = client.Check(ctx, &healthpb.HealthCheckRequest{})
		})
	default:
		const pool = 1000
		srv := testserver.NewHTTP(func(int64, *http.Request, []byte) testserver.HTTPAnswer {
			<-gate
			return testserver.HTTPAnswer{Body: "ok"}
		})
		defer srv.Close()
		base := &http.Transport{MaxConnsPerHost: pool, MaxIdleConnsPerHost: pool}
		defer base.CloseIdleConnections()
		var rt http.RoundTripper = base
		switch impl {
		case "callguard":
			rt = must(httpmw.New(base, c))
		case "plain-wrapped":
			rt = wrapper{base}
		}
		client := &http.Client{Transport: rt}
		return inFlight(b, concurrent, srv.Received.Load, pool, release, func(ctx context.Context) {
			req := must(http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil))
			if resp, err := client.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		})
	}
}

// wrapper is a RoundTripper that does nothing but take 256 bytes of stack
// on the way to base, as a middleware's frame does.
type wrapper struct{ base http.RoundTripper }

//go:noinline
func (w wrapper) RoundTrip(r *http.Request) (*http.Response, error) {
	var frame [256]byte
	frame[r.ProtoMajor&0xff] = 1
	resp, err := w.base.RoundTrip(r)
	if frame[255] == 1 {
		return nil, nil
	}
	return resp, err
}
