package endpoints

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// mode is a backend's behaviour, switched at run time.
type mode int32

const (
	modeOK   mode = iota // answers after service
	modeFail             // gRPC UNAVAILABLE, HTTP 503, at once
	modeHang             // answers nothing until the request's context ends
	modeSlow             // answers after slowBy × service
	modeFlap             // modeFail for flapHalf, then modeOK for flapHalf, and again
)

var modeNames = map[mode]string{modeOK: "ok", modeFail: "fail", modeHang: "hang", modeSlow: "slow", modeFlap: "flap"}

// body is every successful answer's payload.
const bodySize = 64

var body = make([]byte, bodySize)

// backend is one server of a fleet: its address, its mode, and the time
// of every request it received (since the case's clock).
type backend struct {
	addr   string
	clock  time.Time
	mode   atomic.Int32
	flapAt atomic.Int64 // when modeFlap was set, in ns since clock
	quit   chan struct{}

	mu       sync.Mutex
	arrivals []time.Duration
}

func (b *backend) set(m mode) {
	if m == modeFlap {
		b.flapAt.Store(int64(time.Since(b.clock)))
	}
	b.mode.Store(int32(m))
}

// now is b's mode at this moment (a flapping backend's half).
func (b *backend) now() mode {
	m := mode(b.mode.Load())
	if m != modeFlap {
		return m
	}
	if (time.Since(b.clock)-time.Duration(b.flapAt.Load()))/flapHalf%2 == 0 {
		return modeFail
	}
	return modeOK
}

// handle serves one request of ctx: it records its arrival, then answers
// as b's mode says; false is a failure to answer 503 / UNAVAILABLE.
func (b *backend) handle(ctx context.Context) bool {
	at := time.Since(b.clock)
	b.mu.Lock()
	b.arrivals = append(b.arrivals, at)
	b.mu.Unlock()
	wait := service
	switch b.now() {
	case modeFail:
		return false
	case modeHang:
		select {
		case <-ctx.Done():
		case <-b.quit:
		}
		return false
	case modeSlow:
		wait = slowBy * service
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-b.quit:
		return false
	}
}

// received is the arrivals so far, sorted.
func (b *backend) received() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := slices.Clone(b.arrivals)
	slices.Sort(out)
	return out
}

// testService is grpc-go's interop TestService whose UnaryCall is b's.
type testService struct {
	testgrpc.UnimplementedTestServiceServer
	b *backend
}

func (s testService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if !s.b.handle(ctx) {
		return nil, status.Error(codes.Unavailable, "endpoints: the backend failed the call")
	}
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: body}}, nil
}

// fleet is ten backends of one protocol on 127.0.0.2 … 127.0.0.11, one
// port: behind one name.
type fleet struct {
	proto string
	port  int
	bs    []*backend
	stops []func()
}

// ips are the fleet's addresses, 127.0.0.2 … 127.0.0.11 (Linux routes
// 127/8 to the loopback interface).
func ips() []string {
	out := make([]string, backends)
	for i := range out {
		out[i] = "127.0.0." + strconv.Itoa(i+2)
	}
	return out
}

// startFleet starts ten backends of proto (grpc or http) on one port:
// the first listens on :0, the others on its port; a port taken on one of
// the other addresses starts again with a new one.
func startFleet(proto string, clock time.Time) (*fleet, error) {
	var lastErr error
	for range 20 {
		lis, err := listenAll()
		if err != nil {
			lastErr = err
			continue
		}
		f := &fleet{proto: proto, port: lis[0].Addr().(*net.TCPAddr).Port}
		for _, l := range lis {
			b := &backend{addr: l.Addr().String(), clock: clock, quit: make(chan struct{})}
			f.bs = append(f.bs, b)
			f.stops = append(f.stops, serve(proto, b, l))
		}
		return f, nil
	}
	return nil, fmt.Errorf("endpoints: no port free on all of %v: %w", ips(), lastErr)
}

func listenAll() ([]net.Listener, error) {
	var lis []net.Listener
	port := "0"
	for _, ip := range ips() {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, port))
		if err != nil {
			for _, l := range lis {
				_ = l.Close()
			}
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, err
			}
			return nil, fmt.Errorf("endpoints: listen on %s: %w", ip, err)
		}
		lis = append(lis, l)
		port = strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	}
	return lis, nil
}

// serve serves b's protocol on l; the function it returns stops it (a
// hanging request is released first).
func serve(proto string, b *backend, l net.Listener) func() {
	done := make(chan struct{})
	if proto == "grpc" {
		srv := grpc.NewServer()
		testgrpc.RegisterTestServiceServer(srv, testService{b: b})
		go func() {
			defer close(done)
			_ = srv.Serve(l)
		}()
		return func() {
			close(b.quit)
			srv.Stop()
			<-done
		}
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if !b.handle(r.Context()) {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	return func() {
		close(b.quit)
		_ = srv.Close()
		<-done
	}
}

func (f *fleet) stop() {
	for _, s := range f.stops {
		s()
	}
}

// addrs are the fleet's addresses, ip:port.
func (f *fleet) addrs() []string {
	out := make([]string, len(f.bs))
	for i, b := range f.bs {
		out[i] = b.addr
	}
	return out
}

// hosts is the test's own resolver for HTTP: serviceName to the fleet's ten
// addresses, in the same order every time (the arms that spread over
// them choose).
type hosts struct{}

func (hosts) LookupHost(_ context.Context, host string) ([]string, error) {
	if host != serviceName {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return ips(), nil
}

// rotatingDial is the plain HTTP arm's DialContext: it resolves the host
// through r and connects to its addresses in turn, one per new
// connection, as a client does behind a DNS server that rotates its
// answers (Go's own dialer takes the first address that answers).
func rotatingDial(r hosts) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var next atomic.Uint64
	d := &net.Dialer{KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		ips, err := r.LookupHost(ctx, host)
		if err != nil {
			return nil, err
		}
		ip := ips[(next.Add(1)-1)%uint64(len(ips))]
		return d.DialContext(ctx, network, net.JoinHostPort(ip, port))
	}
}
