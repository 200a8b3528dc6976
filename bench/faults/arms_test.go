package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/preset"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// The arms of every cell, each with its own server and proxy, run side
// by side under the same fault.
const (
	armStandard  = "standard"   // grpcmw.Standard / httpmw.Standard, preset.Settings{}
	armPlain     = "plain"      // no policy, the same per-call deadline
	armGRPCRetry = "grpc-retry" // grpc-go's own retry from a service config
	armFailsafe  = "failsafe"   // failsafe-go at the preset's numbers
)

// armsOf is the arms of a protocol, in the order the report lists them.
func armsOf(proto string) []string {
	if proto == "grpc" {
		return []string{armStandard, armPlain, armGRPCRetry, armFailsafe}
	}
	return []string{armStandard, armPlain, armFailsafe}
}

// armConfigs say how each arm is configured, for the report.
var armConfigs = []struct{ name, config string }{
	{armStandard, "`grpcmw.Standard(preset.Settings{}, grpcmw.AllIdempotent())` with its `DialOptions()`; `httpmw.Standard(base, preset.Settings{})`: retry 3 attempts (100 ms → 1 s) → adaptive limit → breaker (10 consecutive failures over at least 500 ms, open 1 s, 2 of 3 probes) → adaptive attempt timeout from 300 ms (scouts in doubt)"},
	{armPlain, "no policy: `grpc.NewClient` with its defaults; an `http.Client` on the base transport"},
	{armGRPCRetry, "grpc-go's retry from a service config: maxAttempts 3, initialBackoff 0.1s, maxBackoff 1s, backoffMultiplier 2, retryableStatusCodes UNAVAILABLE"},
	{armFailsafe, "failsafe-go v0.9.8 at the preset's numbers, outermost first: retry 3 attempts, backoff 100 ms → 1 s ×2, jitter 0.2, an open breaker not retried (failsafegrpc's retry builder, which retries Unavailable, DeadlineExceeded and ResourceExhausted, plus a cut attempt; failsafehttp's, which retries transport errors, 5xx but 501, and 429); breaker opens on 10 consecutive failures (over HTTP: transport errors, 5xx, 429; failsafe-go has no rule on how long the run lasts, the preset's 500 ms), open 1 s, closes on 2 of 3 probes; timeout 300 ms per attempt; `failsafegrpc.NewUnaryClientInterceptor` with `grpc.WithDisableRetry()`, `failsafehttp.NewRoundTripper`"},
}

// The numbers every arm shares.
const (
	callers  = 20
	deadline = time.Second
)

// arm is one client of a cell: call makes one call under ctx (which
// carries the call's deadline); opens are its breaker's opens. Each
// attempt carries, in phaseHeader, the cell's phase when it was sent:
// stamped innermost (an interceptor after the arm's, a RoundTripper under
// the arm's), so that a retry is stamped with its own phase. grpc-go's
// own retry resends below the interceptors: its attempts carry their
// call's phase.
type arm struct {
	name  string
	call  func(ctx context.Context) error
	opens openLog
	close func()
}

// stampGRPC is the innermost interceptor: the phase in the metadata.
func stampGRPC(phase *atomic.Int32) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx = metadata.AppendToOutgoingContext(ctx, phaseHeader, strconv.Itoa(int(phase.Load())))
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// stampHTTP is the RoundTripper under the arm's: the phase in a header
// of a copy of the request (a RoundTripper never modifies its request).
type stampHTTP struct {
	base  http.RoundTripper
	phase *atomic.Int32
}

func (s stampHTTP) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set(phaseHeader, strconv.Itoa(int(s.phase.Load())))
	return s.base.RoundTrip(r)
}

// openLog records when a breaker opened.
type openLog struct {
	mu sync.Mutex
	at []time.Time
}

func (o *openLog) add() {
	o.mu.Lock()
	o.at = append(o.at, time.Now())
	o.mu.Unlock()
}

func (o *openLog) times() []time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]time.Time(nil), o.at...)
}

const grpcRetryConfig = `{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],"retryPolicy":{
	"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`

// The failsafe-go arm's numbers: the preset's.
const (
	fsAttempts      = preset.DefaultAttempts
	fsBackoff       = preset.DefaultBackoff
	fsMaxBackoff    = preset.DefaultMaxBackoff
	fsConsecutive   = breaker.DefaultConsecutiveFailures
	fsOpen          = preset.DefaultOpenTimeout
	fsCloseOn       = preset.DefaultHalfOpenSuccesses
	fsProbes        = 3
	fsAttemptCutoff = preset.DefaultAttemptTimeout
)

// newGRPCArm is arm name against the gRPC server at addr.
func newGRPCArm(name, addr string, phase *atomic.Int32) (*arm, error) {
	a := &arm{name: name}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	switch name {
	case armStandard:
		ic, err := grpcmw.Standard(preset.Settings{}, grpcmw.AllIdempotent(), grpcmw.OnStateChange(func(c breaker.StateChange) {
			if c.To == breaker.StateOpen {
				a.opens.add()
			}
		}))
		if err != nil {
			return nil, err
		}
		opts = append(opts, ic.DialOptions()...)
	case armPlain:
	case armGRPCRetry:
		opts = append(opts, grpc.WithDefaultServiceConfig(grpcRetryConfig))
	case armFailsafe:
		rp := failsafegrpc.NewRetryPolicyBuilder[any]().
			HandleErrors(fstimeout.ErrExceeded).
			WithMaxAttempts(fsAttempts).
			WithBackoff(fsBackoff, fsMaxBackoff).WithJitterFactor(0.2).
			AbortOnErrors(circuitbreaker.ErrOpen).
			Build()
		cb := circuitbreaker.NewBuilder[any]().
			WithFailureThreshold(fsConsecutive).WithDelay(fsOpen).WithSuccessThresholdRatio(fsCloseOn, fsProbes).
			OnOpen(func(circuitbreaker.StateChangedEvent) { a.opens.add() }).
			Build()
		to := fstimeout.New[any](fsAttemptCutoff)
		opts = append(opts, grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(failsafegrpc.NewUnaryClientInterceptor[any](rp, cb, to)))
	default:
		return nil, fmt.Errorf("faults: no gRPC arm %q", name)
	}
	opts = append(opts, grpc.WithChainUnaryInterceptor(stampGRPC(phase)))
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	client := testgrpc.NewTestServiceClient(conn)
	req := &testgrpc.SimpleRequest{ResponseSize: smallBody}
	a.call = func(ctx context.Context) error {
		resp, err := client.UnaryCall(ctx, req)
		if err != nil {
			return err
		}
		if n := len(resp.GetPayload().GetBody()); n != smallBody {
			return fmt.Errorf("faults: a %d-byte payload, want %d", n, smallBody)
		}
		return nil
	}
	a.close = func() { _ = conn.Close() }
	return a, nil
}

// newHTTPArm is arm name sending GET url (its host and port: those of
// the arm's proxy, or any, with dial set) through a transport of its own
// that dials with dial when it is not nil.
func newHTTPArm(name, url string, dial func(ctx context.Context, network, addr string) (net.Conn, error), phase *atomic.Int32) (*arm, error) {
	a := &arm{name: name}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	if dial != nil {
		tr.DialContext = dial
	}
	var base http.RoundTripper = stampHTTP{tr, phase}
	rt := base
	switch name {
	case armStandard:
		st, err := httpmw.Standard(base, preset.Settings{}, httpmw.OnStateChange(func(c breaker.StateChange) {
			if c.To == breaker.StateOpen {
				a.opens.add()
			}
		}))
		if err != nil {
			return nil, err
		}
		rt = st
	case armPlain:
	case armFailsafe:
		rp := failsafehttp.NewRetryPolicyBuilder().
			WithMaxAttempts(fsAttempts).
			WithBackoff(fsBackoff, fsMaxBackoff).WithJitterFactor(0.2).
			AbortOnErrors(circuitbreaker.ErrOpen).
			Build()
		cb := circuitbreaker.NewBuilder[*http.Response]().
			HandleIf(func(resp *http.Response, err error) bool {
				return err != nil || resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests
			}).
			WithFailureThreshold(fsConsecutive).WithDelay(fsOpen).WithSuccessThresholdRatio(fsCloseOn, fsProbes).
			OnOpen(func(circuitbreaker.StateChangedEvent) { a.opens.add() }).
			Build()
		rt = failsafehttp.NewRoundTripper(base, rp, cb, fstimeout.New[*http.Response](fsAttemptCutoff))
	default:
		return nil, fmt.Errorf("faults: no HTTP arm %q", name)
	}
	client := &http.Client{Transport: rt}
	a.call = func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		if cerr := resp.Body.Close(); err == nil {
			err = cerr
		}
		switch {
		case err != nil:
			return err
		case resp.StatusCode != http.StatusOK:
			return &statusErr{resp.StatusCode}
		case n != int64(len(bodies[req.URL.Path])):
			return fmt.Errorf("faults: a %d-byte body, want %d", n, len(bodies[req.URL.Path]))
		}
		return nil
	}
	a.close = tr.CloseIdleConnections
	return a, nil
}

// statusErr is an answer other than 200.
type statusErr struct{ code int }

func (e *statusErr) Error() string { return "faults: HTTP " + strconv.Itoa(e.code) }

// roundRobin is a DialContext that spreads connections over addrs, in
// turn, whatever address it is asked for: one host name, several
// backends.
func roundRobin(addrs []string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var next atomic.Uint64
	d := &net.Dialer{KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addrs[(next.Add(1)-1)%uint64(len(addrs))])
	}
}
