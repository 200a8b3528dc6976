package grpcmw_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/endpoint"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/preset"
	"github.com/callguard/callguard/retry"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// fleet is n real gRPC servers behind one name (a resolver of the test's
// own), each answering as its fault says.
type fleet struct {
	srvs  []*testserver.GRPC
	fault []atomic.Int32 // per server: 0 ok, 1 Unavailable, 2 slow (50 ms)
	res   *manual.Resolver
}

const (
	faultOK = iota
	faultFail
	faultSlow
)

func newFleet(t *testing.T, n int) *fleet {
	t.Helper()
	f := &fleet{fault: make([]atomic.Int32, n), res: manual.NewBuilderWithScheme("fleet" + strings.ToLower(strings.NewReplacer("/", "", "_", "").Replace(t.Name())))}
	var eps []resolver.Endpoint
	for i := range n {
		srv, err := testserver.NewGRPC(func(int64, string) testserver.GRPCAnswer {
			switch f.fault[i].Load() {
			case faultFail:
				return testserver.GRPCAnswer{Code: codes.Unavailable}
			case faultSlow:
				return testserver.GRPCAnswer{Delay: 50 * time.Millisecond}
			}
			return testserver.GRPCAnswer{}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		f.srvs = append(f.srvs, srv)
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: srv.Addr}}})
	}
	f.res.InitialState(resolver.State{Endpoints: eps})
	return f
}

func (f *fleet) dial(t *testing.T, opts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(f.res)}, opts...)
	conn, err := grpc.NewClient(f.res.Scheme()+":///backends", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// ready makes calls until each of the servers idx has received one (at
// most 500): round_robin picks among the READY endpoints only, and a
// test of where picks go needs them all.
func (f *fleet) ready(c healthpb.HealthClient, idx ...int) {
	for range 500 {
		all := true
		for _, i := range idx {
			all = all && f.srvs[i].Received.Load() > 0
		}
		if all {
			return
		}
		calls(c, 1, 1)
	}
}

func (f *fleet) received() []int64 {
	out := make([]int64, len(f.srvs))
	for i, s := range f.srvs {
		out[i] = s.Received.Load()
	}
	return out
}

// calls makes n calls from w callers and returns how many failed.
func calls(c healthpb.HealthClient, n, w int, opts ...grpc.CallOption) int64 {
	var failed, next atomic.Int64
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				if check(ctx, c, opts...) != nil {
					failed.Add(1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	return failed.Load()
}

func TestEndpointsEjectTheFailingOne(t *testing.T) {
	f := newFleet(t, 10)
	f.fault[0].Store(faultFail)
	var ejections atomic.Int32
	h := must(grpcmw.NewEndpointHealth(endpoint.Settings{OnChange: func(c endpoint.Change) {
		if c.Ejected {
			ejections.Add(1)
		}
	}}))
	c := f.dial(t, h.DialOption())
	calls(c, 100, 1) // the first calls find #0 failing
	before := f.received()
	failed := calls(c, 1000, 4)
	after := f.received()
	got0 := after[0] - before[0]
	// #0's fair share is 100 of the 1,000; ejected for 500 ms to 1 s at a
	// time, it gets its probes (3 a round) and the calls already picked.
	if got0 > 20 {
		t.Errorf("the failing endpoint got %d of 1,000 calls after its ejection (fair share 100)", got0)
	}
	if failed != got0 {
		t.Errorf("%d calls failed, %d went to the failing endpoint: a healthy one failed or refused", failed, got0)
	}
	for i := 1; i < 10; i++ {
		if d := after[i] - before[i]; d < 80 {
			t.Errorf("healthy endpoint #%d got %d calls of 1,000", i, d)
		}
	}
	if ejections.Load() == 0 {
		t.Error("no ejection was told")
	}
	var ejected []string
	for _, s := range h.Statuses() {
		if s.Ejected {
			ejected = append(ejected, s.Endpoint)
		}
	}
	if len(ejected) != 1 || ejected[0] != f.srvs[0].Addr {
		t.Errorf("ejected %v, want [%s]", ejected, f.srvs[0].Addr)
	}
}

func TestEndpointsRetryGoesElsewhere(t *testing.T) {
	// Two endpoints, one failing every call, never ejected (1,000 in a
	// row): a call's second attempt must go to the other one, whatever
	// the round robin's turn is under eight callers.
	f := newFleet(t, 2)
	f.fault[0].Store(faultFail)
	h := must(grpcmw.NewEndpointHealth(endpoint.Settings{Breaker: breaker.Settings{ConsecutiveFailures: 1000}}))
	rp := must(retry.New(retry.MaxAttempts(2), retry.Constant(time.Millisecond), retry.Jitter(0)))
	ic := must(grpcmw.NewInterceptors(must(chain.New(rp)), grpcmw.AllIdempotent(), grpcmw.Endpoints(h)))
	c := f.dial(t, ic.DialOptions()...)
	f.ready(c, 0, 1)
	if failed := calls(c, 400, 8); failed != 0 {
		t.Errorf("%d of 400 calls failed: a retry went back to the failing endpoint", failed)
	}
}

func TestEndpointsCapTheEjections(t *testing.T) {
	f := newFleet(t, 10)
	for i := range f.fault {
		f.fault[i].Store(faultFail)
	}
	var now, most atomic.Int32
	var capped atomic.Int32
	h := must(grpcmw.NewEndpointHealth(endpoint.Settings{OnChange: func(c endpoint.Change) {
		switch {
		case c.Capped:
			capped.Add(1)
		case c.Ejected:
			n := now.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
		default:
			now.Add(-1)
		}
	}}))
	c := f.dial(t, h.DialOption())
	if failed := calls(c, 500, 4); failed != 500 {
		t.Errorf("%d of 500 calls failed, want all", failed)
	}
	if m := most.Load(); m != 1 {
		t.Errorf("at most %d endpoints ejected at once, want 1 (10 %% of 10)", m)
	}
	if capped.Load() == 0 {
		t.Error("no opening beyond the cap was told")
	}
	var left []int64
	for _, n := range f.received() {
		if n < 20 {
			left = append(left, n)
		}
	}
	if len(left) > 1 {
		t.Errorf("endpoints with few calls (under 20 of 500): %v: more than the cap were left out", left)
	}
}

func TestEndpointsReadmitAfterTheHeal(t *testing.T) {
	f := newFleet(t, 4)
	f.fault[0].Store(faultFail)
	h := must(grpcmw.NewEndpointHealth(endpoint.Settings{}))
	c := f.dial(t, h.DialOption())
	calls(c, 200, 2)
	if st := h.Statuses(); !st[indexOf(st, f.srvs[0].Addr)].Ejected {
		t.Fatalf("#0 not ejected: %+v", st)
	}
	f.fault[0].Store(faultOK)
	healed := time.Now()
	before := f.srvs[0].Received.Load()
	for time.Since(healed) < 5*time.Second {
		calls(c, 20, 2)
		if st := h.Statuses(); !st[indexOf(st, f.srvs[0].Addr)].Ejected {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := h.Statuses()[indexOf(h.Statuses(), f.srvs[0].Addr)]
	if st.Ejected || st.Readmissions == 0 {
		t.Fatalf("#0 not readmitted 5 s after its heal: %+v", st)
	}
	calls(c, 200, 2)
	if got := f.srvs[0].Received.Load() - before; got < 40 {
		t.Errorf("the healed endpoint got %d calls since its heal, want its share of 200 and more", got)
	}
}

func TestEndpointsEjectTheSlowOne(t *testing.T) {
	f := newFleet(t, 5)
	f.fault[0].Store(faultSlow)
	h := must(grpcmw.NewEndpointHealth(endpoint.Settings{}))
	c := f.dial(t, h.DialOption())
	calls(c, 300, 8)
	before := f.srvs[0].Received.Load()
	calls(c, 500, 8)
	if got := f.srvs[0].Received.Load() - before; got > 25 {
		t.Errorf("the slow endpoint (50 ms, the others under 1 ms) got %d of 500 calls after its ejection (fair share 100)", got)
	}
}

func TestEndpointsServiceConfig(t *testing.T) {
	f := newFleet(t, 3)
	f.fault[0].Store(faultFail)
	c := f.dial(t, grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"callguard_endpoints":{"childPolicy":[{"no_such_policy":{}},{"round_robin":{}}],"consecutiveFailures":2,"openTimeout":"30s","maxEjectionPercent":50,"slowFactor":-1}}]}`))
	f.ready(c, 0, 1, 2)
	calls(c, 60, 1)
	before := f.srvs[0].Received.Load()
	if failed := calls(c, 300, 1); failed != 0 {
		t.Errorf("%d of 300 calls failed after the ejection (open 30 s)", failed)
	}
	if got := f.srvs[0].Received.Load() - before; got != 0 {
		t.Errorf("the ejected endpoint got %d calls", got)
	}

	for _, tc := range []struct{ cfg, want string }{
		{`{"consecutiveFailure":2}`, `unknown field "consecutiveFailure"`},
		{`{"openTimeout":"soon"}`, "openTimeout"},
		{`{"maxEjectionPercent":101}`, "Settings.MaxEjectionPercent"},
		{`{"childPolicy":[{"no_such_policy":{}}]}`, "no policy of the list is registered"},
	} {
		srv, err := testserver.NewGRPC(func(int64, string) testserver.GRPCAnswer { return testserver.GRPCAnswer{} })
		if err != nil {
			t.Fatal(err)
		}
		_, err = srv.Dial(grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"callguard_endpoints":` + tc.cfg + `}]}`))
		srv.Stop()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %s: error %v, want one saying %q", tc.cfg, err, tc.want)
		}
	}
	var e *endpoint.Error
	if _, err := grpcmw.NewEndpointHealth(endpoint.Settings{SlowFactor: 0.5}); !errors.As(err, &e) || e.Field != "SlowFactor" {
		t.Errorf("NewEndpointHealth(SlowFactor 0.5): %v, want an *endpoint.Error naming SlowFactor", err)
	}
	if _, err := grpcmw.NewInterceptors(nil, grpcmw.Endpoints(nil)); err == nil {
		t.Error("Endpoints(nil) accepted")
	}
}

func indexOf(st []endpoint.Status, addr string) int {
	for i, s := range st {
		if s.Endpoint == addr {
			return i
		}
	}
	return -1
}

// TestEndpointsUnderStandard: the recommended chain over the policy, one
// endpoint of ten failing every call: idempotent calls all succeed (their
// retries go elsewhere), calls that may be sent once lose only those sent
// before the ejection and to its probes, the per-method breaker stays
// closed, and the endpoint's ejection shows in the metrics.
func TestEndpointsUnderStandard(t *testing.T) {
	f := newFleet(t, 10)
	f.fault[0].Store(faultFail)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	h := must(grpcmw.NewEndpointHealth(endpoint.Settings{}))
	idem := must(grpcmw.Standard(preset.Settings{}, grpcmw.AllIdempotent(), grpcmw.Endpoints(h), grpcmw.Metrics(mp)))
	once := must(grpcmw.Standard(preset.Settings{}, grpcmw.Endpoints(h)))
	if failed := calls(f.dial(t, idem.DialOptions()...), 1000, 8); failed != 0 {
		t.Errorf("idempotent: %d of 1,000 calls failed", failed)
	}
	// The failing endpoint's failures; a call the chain's adaptive attempt
	// timeout cut on a loaded machine is the chain's, not the policy's.
	byCode := map[codes.Code]int{}
	var mu sync.Mutex
	c := f.dial(t, once.DialOptions()...)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 125 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := check(ctx, c)
				cancel()
				mu.Lock()
				byCode[status.Code(err)]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n := byCode[codes.Unavailable]; n > 10 {
		t.Errorf("not idempotent: %d of 1,000 calls failed UNAVAILABLE (%v), want at most the 5 before the ejection and a few probes", n, byCode)
		for _, st := range h.Statuses() {
			t.Logf("%s %s ejected %v ejections %d capped %d latency %v counts %+v", st.Service, st.Endpoint, st.Ejected, st.Ejections, st.Capped, st.Latency, st.Counts)
		}
	}
	for _, b := range append(idem.Breakers(), once.Breakers()...) {
		if b.State != breaker.StateClosed {
			t.Errorf("per-method breaker %q is %v", b.Key, b.State)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	ejected := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "callguard.endpoint.ejected" {
				for _, p := range g.DataPoints {
					host, _ := p.Attributes.Value("server.address")
					port, _ := p.Attributes.Value("server.port")
					ejected[fmt.Sprintf("%s:%d", host.AsString(), port.AsInt64())] += p.Value
				}
			}
		}
	}
	// Two channels share h: each has ten endpoints, #0 ejected in each.
	if len(ejected) != 10 || ejected[f.srvs[0].Addr] != 2 {
		t.Errorf("callguard.endpoint.ejected by endpoint = %v, want 10 endpoints, %s ejected in both channels", ejected, f.srvs[0].Addr)
	}
}

// TestEndpointsHedgeGoesElsewhere: two endpoints, #0 answering in 50 ms
// and never judged (its breaker would need 1,000 failures, the slow
// judgement off); a hedge after 5 ms. A call whose first attempt went to
// #0 sends its hedge to #1, never to #0 again: every call's attempts, as
// the innermost interceptor saw their peers, went to distinct endpoints.
func TestEndpointsHedgeGoesElsewhere(t *testing.T) {
	f := newFleet(t, 2)
	f.fault[0].Store(faultSlow)
	h := must(grpcmw.NewEndpointHealth(endpoint.Settings{SlowFactor: -1, Breaker: breaker.Settings{ConsecutiveFailures: 1000}}))
	hp := must(hedge.New(hedge.Settings{Delay: 5 * time.Millisecond, MaxHedges: 1}))
	ic := must(grpcmw.NewInterceptors(must(chain.New(hp)), grpcmw.AllIdempotent(), grpcmw.UnaryOnly(), grpcmw.Endpoints(h)))
	type callKey struct{}
	var mu sync.Mutex
	peers := map[int][]string{}
	record := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var p peer.Peer
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&p))...)
		if n, ok := ctx.Value(callKey{}).(int); ok && p.Addr != nil {
			mu.Lock()
			peers[n] = append(peers[n], p.Addr.String())
			mu.Unlock()
		}
		return err
	}
	c := f.dial(t, append(ic.DialOptions(), grpc.WithChainUnaryInterceptor(record))...)
	f.ready(c, 0, 1)
	mu.Lock()
	clear(peers)
	mu.Unlock()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 25 {
				ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), callKey{}, w*100+i), time.Second)
				if err := check(ctx, c); err != nil {
					t.Error(err)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	hedged := 0
	for n, ps := range peers {
		if len(ps) > 1 {
			hedged++
		}
		if len(ps) == 2 && ps[0] == ps[1] {
			t.Errorf("call %d: both attempts went to %s", n, ps[0])
		}
	}
	if hedged == 0 {
		t.Error("no call was hedged")
	}
}
