package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/httpmw"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"
	mwretry "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	mwtimeout "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/timeout"
	"github.com/hashicorp/go-retryablehttp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The loopback benchmarks put each implementation on a real call: an HTTP
// GET to an httptest server, or a gRPC Health/Check to a grpc-go server,
// both over loopback TCP. Every call succeeds, so they measure what the
// success path of each library adds to a real call, against impl=plain (the
// same client with no policy at all).

// loopbackOp makes one call and returns nil only if it succeeded. It is
// safe for concurrent use.
type loopbackOp func(ctx context.Context) error

// loopbackImpl builds a server and a client for one implementation: the
// op, and a stop that closes the client's connections, then the server.
type loopbackImpl struct {
	name string
	new  func(tb testing.TB, srv *loopbackCounter) (do loopbackOp, stop func())
}

// loopbackCounter, when not nil, counts the calls the server answers (the
// test uses it; the benchmarks pass nil).
type loopbackCounter struct{ n atomic.Int64 }

type loopbackProto struct {
	name  string
	impls []loopbackImpl
}

var loopbackProtos = []loopbackProto{
	{"http", []loopbackImpl{
		{"plain", newHTTPPlain},
		{"plain-deadline", withDeadline(newHTTPPlain)},
		{"callguard", newHTTPCallguard},
		{"callguard-headers-only", newHTTPCallguardHeadersOnly},
		{"callguard-no-timeout", newHTTPCallguardNoTimeout},
		{"failsafehttp", newHTTPFailsafe},
		{"retryablehttp", newHTTPRetryablehttp},
	}},
	{"grpc", []loopbackImpl{
		{"plain", newGRPCPlain},
		{"plain-deadline", withDeadline(newGRPCPlain)},
		{"callguard", newGRPCCallguard},
		{"callguard-no-timeout", newGRPCCallguardNoTimeout},
		{"callguard-judge-from-header", newGRPCCallguardJudgeFromHeader},
		{"failsafe", newGRPCFailsafe},
		{"grpcmiddleware", newGRPCMiddleware},
	}},
}

// BenchmarkLoopback measures one successful call over loopback TCP per op.
// Compare with
//
//	benchstat -col /impl out.txt
func BenchmarkLoopback(b *testing.B) {
	for _, p := range loopbackProtos {
		b.Run("proto="+p.name, func(b *testing.B) {
			b.Run("mode=seq", func(b *testing.B) {
				for _, im := range p.impls {
					b.Run("impl="+im.name, func(b *testing.B) {
						do, stop := im.new(b, nil)
						defer stop()
						ctx := context.Background()
						if err := do(ctx); err != nil { // dial outside the timed loop
							b.Fatal(err)
						}
						b.ReportAllocs()
						for b.Loop() {
							if err := do(ctx); err != nil {
								b.Fatal(err)
							}
						}
					})
				}
			})
			b.Run("mode=parallel", func(b *testing.B) {
				for _, im := range p.impls {
					b.Run("impl="+im.name, func(b *testing.B) {
						do, stop := im.new(b, nil)
						defer stop()
						if err := do(context.Background()); err != nil {
							b.Fatal(err)
						}
						b.ReportAllocs()
						b.ResetTimer()
						runParallel(b, do)
						b.StopTimer()
					})
				}
			})
		})
	}
}

// BenchmarkLoopbackPaired measures each implementation against a base on
// real loopback calls made in turns (base, impl, impl, base, …), so that
// both see the same machine state: the drift between sub-benchmarks that
// BenchmarkLoopback suffers from (several percent on a shared 2-core
// machine) falls on both alike. Each call is timed on its own; reported
// are the median call of each (ns/call, base-ns/call) and the impl's
// overhead over the base in percent. vs=plain against plain itself is the
// noise floor. Compare with
//
//	benchstat -row /proto,/impl -col /vs -filter '.unit:%overhead' out.txt
func BenchmarkLoopbackPaired(b *testing.B) {
	for _, p := range loopbackProtos {
		impls := map[string]loopbackImpl{}
		for _, im := range p.impls {
			impls[im.name] = im
		}
		type pair struct{ impl, base loopbackImpl }
		var pairs []pair
		for _, im := range p.impls {
			pairs = append(pairs, pair{im, impls["plain"]})
		}
		// callguard's own cost: against a plain call with the same deadline.
		pairs = append(pairs, pair{impls["callguard"], impls["plain-deadline"]})
		if hi, ok := impls["callguard-headers-only"]; ok {
			pairs = append(pairs, pair{hi, impls["plain-deadline"]})
		}
		for _, pr := range pairs {
			b.Run("proto="+p.name+"/impl="+pr.impl.name+"/vs="+pr.base.name, func(b *testing.B) {
				benchPaired(b, pr.impl, pr.base)
			})
		}
	}
}

func benchPaired(b *testing.B, impl, base loopbackImpl) {
	doImpl, stopImpl := impl.new(b, nil)
	defer stopImpl()
	doBase, stopBase := base.new(b, nil)
	defer stopBase()
	ctx := context.Background()
	timed := func(do loopbackOp, into *[]time.Duration) {
		start := time.Now()
		if err := do(ctx); err != nil {
			b.Fatal(err)
		}
		*into = append(*into, time.Since(start))
	}
	var implTimes, baseTimes []time.Duration
	timed(doImpl, &implTimes) // dial outside the timed loop
	timed(doBase, &baseTimes)
	implTimes, baseTimes = implTimes[:0], baseTimes[:0]
	turn := 0
	for b.Loop() {
		if turn%2 == 0 {
			timed(doBase, &baseTimes)
			timed(doImpl, &implTimes)
		} else {
			timed(doImpl, &implTimes)
			timed(doBase, &baseTimes)
		}
		turn++
	}
	mi, mb := median(implTimes), median(baseTimes)
	b.ReportMetric(0, "ns/op") // two calls per op: meaningless
	b.ReportMetric(float64(mi.Nanoseconds()), "ns/call")
	b.ReportMetric(float64(mb.Nanoseconds()), "base-ns/call")
	b.ReportMetric(100*(float64(mi)/float64(mb)-1), "%overhead")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestLoopbackImplsWork checks the wiring of every implementation: one call
// succeeds, reaches the server exactly once, and nothing is left running
// once the client and server are stopped.
func TestLoopbackImplsWork(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, p := range loopbackProtos {
		for _, im := range p.impls {
			t.Run(p.name+"/"+im.name, func(t *testing.T) {
				var served loopbackCounter
				do, stop := im.new(t, &served)
				defer stop()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := do(ctx); err != nil {
					t.Fatal(err)
				}
				if n := served.n.Load(); n != 1 {
					t.Errorf("the server answered %d calls, want 1", n)
				}
			})
		}
	}
}

// withDeadline is impl=plain-deadline: the plain client with a 1 s
// context.WithTimeout around each call (body read included), no policy
// library. It is the floor of any attempt timeout on a real call: over
// gRPC the deadline also travels as a grpc-timeout header that the server,
// in the same process, parses and arms a timer for.
func withDeadline(newImpl func(testing.TB, *loopbackCounter) (loopbackOp, func())) func(testing.TB, *loopbackCounter) (loopbackOp, func()) {
	return func(tb testing.TB, served *loopbackCounter) (loopbackOp, func()) {
		do, stop := newImpl(tb, served)
		return func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			return do(ctx)
		}, stop
	}
}

// --- the full chain, as in BenchmarkChain's retry-breaker-timeout ---

func fullChain(tb testing.TB) *chain.Chain {
	c, err := chain.New(cgRetry(tb), cgBreaker(tb), cgTimeout(tb, time.Second))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// --- HTTP ---

// newHTTPServer starts a server that answers every request with 200 "ok".
func newHTTPServer(served *loopbackCounter) *httptest.Server {
	body := []byte("ok")
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if served != nil {
			served.n.Add(1)
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(body)
	}))
}

// newBaseTransport is the transport under every HTTP implementation: its
// own pool, the same settings, enough idle connections for RunParallel to
// reuse them.
func newBaseTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
}

// httpGet is one op: GET, read the body to the end, close it.
func httpGet(ctx context.Context, do func(*http.Request) (*http.Response, error), url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := do(req)
	if err != nil {
		return err
	}
	return readOK(resp)
}

// readOK reads resp's body to the end, closes it, and checks that it is a
// 200 "ok".
func readOK(resp *http.Response) error {
	n, err := io.Copy(io.Discard, resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || n != 2 {
		return fmt.Errorf("got %s with a %d-byte body, want 200 with \"ok\"", resp.Status, n)
	}
	return nil
}

// httpImpl starts a server and returns an op that runs httpGet through the
// client wrapping tr.
func httpImpl(served *loopbackCounter, tr *http.Transport, client *http.Client) (loopbackOp, func()) {
	srv := newHTTPServer(served)
	url := srv.URL + "/"
	return func(ctx context.Context) error { return httpGet(ctx, client.Do, url) },
		func() {
			tr.CloseIdleConnections()
			srv.Close()
		}
}

func newHTTPPlain(_ testing.TB, served *loopbackCounter) (loopbackOp, func()) {
	tr := newBaseTransport()
	return httpImpl(served, tr, &http.Client{Transport: tr})
}

func newHTTPCallguard(tb testing.TB, served *loopbackCounter) (loopbackOp, func()) {
	tr := newBaseTransport()
	return httpImpl(served, tr, &http.Client{Transport: must(httpmw.New(tr, fullChain(tb)))})
}

// newHTTPCallguardHeadersOnly is the full chain counting a response when
// its headers arrive (httpmw.CountBodyErrors(false)): what counting the
// body costs, against newHTTPCallguard.
func newHTTPCallguardHeadersOnly(tb testing.TB, served *loopbackCounter) (loopbackOp, func()) {
	tr := newBaseTransport()
	return httpImpl(served, tr, &http.Client{Transport: must(httpmw.New(tr, fullChain(tb), httpmw.CountBodyErrors(false)))})
}

// newHTTPCallguardNoTimeout is retry → breaker without an attempt timeout.
func newHTTPCallguardNoTimeout(tb testing.TB, served *loopbackCounter) (loopbackOp, func()) {
	tr := newBaseTransport()
	return httpImpl(served, tr, &http.Client{Transport: must(httpmw.New(tr, noTimeoutChain(tb)))})
}

func noTimeoutChain(tb testing.TB) *chain.Chain {
	c, err := chain.New(cgRetry(tb), cgBreaker(tb))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// httpFailure is httpmw.DefaultFailure: a transport error, a 5xx or a 429.
// failsafe-go's breaker counts only errors unless told so.
func httpFailure(resp *http.Response, err error) bool {
	return err != nil || resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests
}

func newHTTPFailsafe(_ testing.TB, served *loopbackCounter) (loopbackOp, func()) {
	tr := newBaseTransport()
	// failsafehttp's retry policy retries transport errors, 5xx (but 501)
	// and 429; 3 attempts, stop on an open breaker.
	rp := failsafehttp.NewRetryPolicyBuilder().
		WithMaxAttempts(3).
		AbortOnErrors(circuitbreaker.ErrOpen).
		Build()
	cb := circuitbreaker.NewBuilder[*http.Response]().
		HandleIf(httpFailure).
		WithFailureThreshold(5).
		Build()
	to := fstimeout.New[*http.Response](time.Second)
	// Outermost first, as in chain.New.
	rt := failsafehttp.NewRoundTripper(tr, rp, cb, to)
	return httpImpl(served, tr, &http.Client{Transport: rt})
}

func newHTTPRetryablehttp(_ testing.TB, served *loopbackCounter) (loopbackOp, func()) {
	tr := newBaseTransport()
	rc := retryablehttp.NewClient()
	rc.Logger = nil
	rc.RetryMax = 2 // 3 attempts
	// retryablehttp calls HTTPClient.Do once per attempt, so the client's
	// Timeout is an attempt timeout that, as in the chain, covers the body.
	rc.HTTPClient = &http.Client{Transport: tr, Timeout: time.Second}
	srv := newHTTPServer(served)
	url := srv.URL + "/"
	return func(ctx context.Context) error {
			req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := rc.Do(req)
			if err != nil {
				return err
			}
			return readOK(resp)
		}, func() {
			tr.CloseIdleConnections()
			srv.Close()
		}
}

// --- gRPC ---

var healthCheckReq = &healthpb.HealthCheckRequest{}

// grpcImpl starts a grpc-go server with the health service on a loopback
// listener and a client with opts on top of the options every
// implementation shares: insecure credentials, and grpc-go's own retry
// disabled (grpcmw's Interceptors.DialOptions disables it; the other retrying
// implementations need it off as much, and plain gets it for equality).
func grpcImpl(tb testing.TB, served *loopbackCounter, opts ...grpc.DialOption) (loopbackOp, func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var sopts []grpc.ServerOption
	if served != nil {
		sopts = append(sopts, grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			served.n.Add(1)
			return h(ctx, req)
		}))
	}
	srv := grpc.NewServer(sopts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = srv.Serve(lis)
	}()
	stopServer := func() {
		srv.Stop()
		wg.Wait()
	}

	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
	}, opts...)
	conn, err := grpc.NewClient(lis.Addr().String(), opts...)
	if err != nil {
		stopServer()
		tb.Fatal(err)
	}
	client := healthpb.NewHealthClient(conn)
	return func(ctx context.Context) error {
			resp, err := client.Check(ctx, healthCheckReq)
			if err != nil {
				return err
			}
			if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				return errors.New("health: " + resp.GetStatus().String())
			}
			return nil
		}, func() {
			_ = conn.Close()
			stopServer()
		}
}

func newGRPCPlain(tb testing.TB, served *loopbackCounter) (loopbackOp, func()) {
	return grpcImpl(tb, served)
}

func newGRPCCallguard(tb testing.TB, served *loopbackCounter) (loopbackOp, func()) {
	return grpcImpl(tb, served, must(grpcmw.NewInterceptors(fullChain(tb), grpcmw.AllIdempotent())).DialOptions()...)
}

// newGRPCCallguardJudgeFromHeader is impl=callguard with
// grpcmw.JudgeFromHeader: its stats handler on the connection makes
// grpc-go emit its stats events for every call.
func newGRPCCallguardJudgeFromHeader(tb testing.TB, served *loopbackCounter) (loopbackOp, func()) {
	return grpcImpl(tb, served, must(grpcmw.NewInterceptors(fullChain(tb), grpcmw.AllIdempotent(), grpcmw.JudgeFromHeader())).DialOptions()...)
}

// newGRPCCallguardNoTimeout is retry → breaker without an attempt timeout:
// what callguard's policies cost on their own, without the deadline
// machinery that impl=plain-deadline measures.
func newGRPCCallguardNoTimeout(tb testing.TB, served *loopbackCounter) (loopbackOp, func()) {
	return grpcImpl(tb, served, must(grpcmw.NewInterceptors(noTimeoutChain(tb), grpcmw.AllIdempotent())).DialOptions()...)
}

func newGRPCFailsafe(tb testing.TB, served *loopbackCounter) (loopbackOp, func()) {
	// failsafegrpc's retry policy retries Unavailable, DeadlineExceeded and
	// ResourceExhausted, as grpcmw does; 3 attempts, stop on an open
	// breaker. The breaker counts every error.
	rp := failsafegrpc.NewRetryPolicyBuilder[any]().
		WithMaxAttempts(3).
		AbortOnErrors(circuitbreaker.ErrOpen).
		Build()
	cb := circuitbreaker.NewBuilder[any]().WithFailureThreshold(5).Build()
	to := fstimeout.New[any](time.Second)
	return grpcImpl(tb, served, grpc.WithChainUnaryInterceptor(failsafegrpc.NewUnaryClientInterceptor(rp, cb, to)))
}

func newGRPCMiddleware(tb testing.TB, served *loopbackCounter) (loopbackOp, func()) {
	// No breaker in go-grpc-middleware. WithMax counts attempts: 3. The
	// first interceptor of the chain is the outermost: the timeout runs
	// inside the retry, once per attempt.
	return grpcImpl(tb, served, grpc.WithChainUnaryInterceptor(
		mwretry.UnaryClientInterceptor(mwretry.WithMax(3)),
		mwtimeout.UnaryClientInterceptor(time.Second),
	))
}

// must returns v, or panics with err (an adapter's construction error in a
// benchmark's setup is a bug).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
