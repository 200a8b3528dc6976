package endpoints

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/endpoint"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/preset"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// The arms, each with its own ten backends, side by side.
const (
	armControl     = "control"        // plain, its ten backends never bad: the healthy latency beside the others
	armPlain       = "plain"          // gRPC round_robin; HTTP keep-alives, connections to the addresses in turn
	armGRPCRetry   = "grpc-retry"     // grpc-go's retry over round_robin
	armStdIdem     = "standard-idem"  // grpcmw.Standard, AllIdempotent, over round_robin
	armStd         = "standard"       // grpcmw.Standard, nothing idempotent, over round_robin
	armEpIdem      = "endpoints-idem" // grpcmw.Standard with grpcmw.Endpoints, AllIdempotent
	armEp          = "endpoints"      // grpcmw.Standard with grpcmw.Endpoints, nothing idempotent
	armStdGet      = "standard-get"   // httpmw.Standard over the plain transport, GET
	armEpGet       = "endpoints-get"  // httpmw.Standard over httpmw.NewEndpoints, GET
	armEpPost      = "endpoints-post" // the same, POST (not idempotent: not retried)
	grpcRoundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`
)

// armsOf are a protocol's arms for the one-bad cases, in the report's
// order.
func armsOf(proto string) []string {
	if proto == "grpc" {
		return []string{armControl, armPlain, armGRPCRetry, armStdIdem, armStd, armEpIdem, armEp}
	}
	return []string{armControl, armPlain, armStdGet, armEpGet, armEpPost}
}

// isNew reports whether name is one of the per-endpoint policy's arms
// (the goal's).
func isNew(name string) bool {
	return name == armEpIdem || name == armEp || name == armEpGet || name == armEpPost
}

// armConfigs say how each arm is configured, for the report.
var armConfigs = []struct{ proto, name, config string }{
	{"both", armControl, "`plain`, on ten backends that stay healthy: its p99, in the same phase, is the healthy p99 the goal measures against (the host's load is the same for every arm)"},
	{"grpc", armPlain, "`grpc.NewClient` on the test's resolver (`resolver/manual`, the ten addresses as endpoints), service config `" + grpcRoundRobin + "`, nothing else"},
	{"grpc", armGRPCRetry, "the same, and grpc-go's retry in the service config: maxAttempts 3, initialBackoff 0.1s, maxBackoff 1s, backoffMultiplier 2, retryableStatusCodes UNAVAILABLE"},
	{"grpc", armStdIdem, "`grpcmw.Standard(preset.Settings{}, grpcmw.AllIdempotent())`'s `DialOptions()` over round_robin: a chain per method (retry 3 attempts → adaptive limit → breaker → adaptive attempt timeout)"},
	{"grpc", armStd, "`grpcmw.Standard(preset.Settings{})` over round_robin: the same chain, the method not idempotent (not retried)"},
	{"grpc", armEpIdem, "`grpcmw.Standard(preset.Settings{}, grpcmw.AllIdempotent(), grpcmw.Endpoints(h))`'s `DialOptions()`, `h` = `grpcmw.NewEndpointHealth(endpoint.Settings{})` (its defaults; its service config selects `callguard_endpoints` over round_robin)"},
	{"grpc", armEp, "the same, the method not idempotent"},
	{"http", armPlain, "`http.Client` on an `http.Transport` with keep-alives (64 idle connections per host) whose `DialContext` resolves the name through the test's resolver and connects to its addresses in turn, one per new connection: a client behind a DNS server that rotates its answers (Go's own dialer would take the first address that answers)"},
	{"http", armStdGet, "`httpmw.Standard(base, preset.Settings{})` over that transport: one chain per host, GET"},
	{"http", armEpGet, "`httpmw.Standard(eps, preset.Settings{})`, `eps` = `httpmw.NewEndpoints(base, endpoint.Settings{}, httpmw.Resolver(r))` over a plain keep-alive transport, the test's resolver `r`: GET"},
	{"http", armEpPost, "the same, POST (not idempotent: never retried)"},
}

// arm is one client of a case, with its own fleet.
type arm struct {
	name  string
	fleet *fleet
	call  func(ctx context.Context) error
	opens eventLog // the per-method or per-host breaker's openings
	// changes and statuses: the per-endpoint policy's (nil for the others).
	changes  *changeLog
	statuses func() []endpoint.Status
	close    func()
}

// eventLog records when something happened.
type eventLog struct {
	mu sync.Mutex
	at []time.Time
}

func (e *eventLog) add() {
	e.mu.Lock()
	e.at = append(e.at, time.Now())
	e.mu.Unlock()
}

func (e *eventLog) times() []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]time.Time(nil), e.at...)
}

// onOpen is a breaker.StateChange callback that logs openings.
func (e *eventLog) onOpen(c breaker.StateChange) {
	if c.To == breaker.StateOpen {
		e.add()
	}
}

// change is one of the per-endpoint policy's changes, timed.
type change struct {
	at time.Time
	endpoint.Change
	ejectedNow int // endpoints ejected just after it, as the log counts them
}

// changeLog records the per-endpoint policy's changes (its
// endpoint.Settings.OnChange) and the most endpoints ejected at once.
type changeLog struct {
	mu      sync.Mutex
	list    []change
	ejected map[string]bool
	most    int
}

func newChangeLog() *changeLog { return &changeLog{ejected: map[string]bool{}} }

func (l *changeLog) add(c endpoint.Change) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !c.Capped {
		if c.Ejected {
			l.ejected[c.Endpoint] = true
		} else {
			delete(l.ejected, c.Endpoint)
		}
	}
	l.most = max(l.most, len(l.ejected))
	l.list = append(l.list, change{at: time.Now(), Change: c, ejectedNow: len(l.ejected)})
}

func (l *changeLog) snapshot() ([]change, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]change(nil), l.list...), l.most
}

// newArm is arm name of proto against f.
func newArm(proto, name string, f *fleet) (*arm, error) {
	if proto == "grpc" {
		return newGRPCArm(name, f)
	}
	return newHTTPArm(name, f)
}

const grpcRetryConfig = `{"loadBalancingConfig":[{"round_robin":{}}],"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],"retryPolicy":{
	"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`

// newGRPCArm is a gRPC arm: a channel on the test's resolver, which gives
// the fleet's ten addresses as endpoints.
func newGRPCArm(name string, f *fleet) (*arm, error) {
	a := &arm{name: name, fleet: f}
	r := manual.NewBuilderWithScheme("cgbench")
	var eps []resolver.Endpoint
	for _, addr := range f.addrs() {
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: addr}}})
	}
	r.InitialState(resolver.State{Endpoints: eps})
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r)}
	switch name {
	case armPlain, armControl:
		opts = append(opts, grpc.WithDefaultServiceConfig(grpcRoundRobin))
	case armGRPCRetry:
		opts = append(opts, grpc.WithDefaultServiceConfig(grpcRetryConfig))
	case armStdIdem, armStd:
		std := []grpcmw.Option{grpcmw.OnStateChange(a.opens.onOpen)}
		if name == armStdIdem {
			std = append(std, grpcmw.AllIdempotent())
		}
		ic, err := grpcmw.Standard(preset.Settings{}, std...)
		if err != nil {
			return nil, err
		}
		opts = append(append(opts, ic.DialOptions()...), grpc.WithDefaultServiceConfig(grpcRoundRobin))
	case armEpIdem, armEp:
		more, err := endpointsGRPC(a, name == armEpIdem)
		if err != nil {
			return nil, err
		}
		opts = append(opts, more...)
	default:
		return nil, fmt.Errorf("endpoints: no gRPC arm %q", name)
	}
	conn, err := grpc.NewClient("cgbench:///"+serviceName, opts...)
	if err != nil {
		return nil, err
	}
	client := testgrpc.NewTestServiceClient(conn)
	req := &testgrpc.SimpleRequest{ResponseSize: bodySize}
	a.call = func(ctx context.Context) error {
		resp, err := client.UnaryCall(ctx, req)
		if err != nil {
			return err
		}
		if n := len(resp.GetPayload().GetBody()); n != bodySize {
			return fmt.Errorf("endpoints: a %d-byte payload, want %d", n, bodySize)
		}
		return nil
	}
	a.close = func() { _ = conn.Close() }
	return a, nil
}

// keepAlive is a transport with keep-alives, as every HTTP arm has.
func keepAlive() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
}

// newHTTPArm is an HTTP arm sending to http://backends.test:port/.
func newHTTPArm(name string, f *fleet) (*arm, error) {
	a := &arm{name: name, fleet: f}
	tr := keepAlive()
	var rt http.RoundTripper = tr
	method := http.MethodGet
	switch name {
	case armPlain, armControl:
		tr.DialContext = rotatingDial(hosts{})
	case armStdGet:
		tr.DialContext = rotatingDial(hosts{})
		st, err := httpmw.Standard(tr, preset.Settings{}, httpmw.OnStateChange(a.opens.onOpen))
		if err != nil {
			return nil, err
		}
		rt = st
	case armEpGet, armEpPost:
		if name == armEpPost {
			method = http.MethodPost
		}
		var err error
		if rt, err = endpointsHTTP(a, tr); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("endpoints: no HTTP arm %q", name)
	}
	client := &http.Client{Transport: rt}
	url := "http://" + net.JoinHostPort(serviceName, strconv.Itoa(f.port)) + "/unary"
	payload := []byte("callguard endpoints bench")
	a.call = func(ctx context.Context) error {
		var in io.Reader
		if method == http.MethodPost {
			in = bytes.NewReader(payload)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, in)
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
		case n != bodySize:
			return fmt.Errorf("endpoints: a %d-byte body, want %d", n, bodySize)
		}
		return nil
	}
	a.close = client.CloseIdleConnections
	return a, nil
}

// statusErr is an answer other than 200.
type statusErr struct{ code int }

func (e *statusErr) Error() string { return "endpoints: HTTP " + strconv.Itoa(e.code) }
