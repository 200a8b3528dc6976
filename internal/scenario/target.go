package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/internal/testserver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Answer is how the downstream of a seed experiment answers one request.
type Answer struct {
	Fail  bool          // a failure: HTTP 503, gRPC Unavailable, an error in process
	Delay time.Duration // before answering
	Hang  bool          // until the caller gives up
	// Deaf: the Delay runs to its end even if the caller has gone (work
	// wasted, counted).
	Deaf bool
}

// Downstream decides each answer of a seed experiment's downstream, by the
// request's number (from 1) and the time since the target started.
type Downstream func(n int64, at time.Duration) Answer

// ErrDownstream is what an in-process downstream fails with.
var ErrDownstream = errors.New("scenario: downstream failed")

// Target is where a seed experiment's requests go: a downstream in process
// (to run in virtual time), or one behind a real loopback HTTP or gRPC
// server, reached through the kit's adapters (to run in real time).
type Target interface {
	// Proto is "in-process", "http" or "grpc".
	Proto() string
	// Client returns the function that makes one request through c.
	Client(c *chain.Chain) (func(context.Context) error, error)
	// Received is the requests the downstream received; Wasted, those it
	// finished deafly after their caller had gone.
	Received() int64
	Wasted() int64
	// Close stops the target's servers and connections, and waits for its
	// goroutines.
	Close()
}

// NewTarget makes a target of proto ("in-process", "http" or "grpc") for
// d.
func NewTarget(proto string, d Downstream) (Target, error) {
	switch proto {
	case "in-process":
		t := &inProcess{d: d}
		t.clock.reset(time.Now())
		return t, nil
	case "http":
		return newHTTPTarget(d), nil
	case "grpc":
		return newGRPCTarget(d)
	}
	return nil, fmt.Errorf("scenario: no target %q (in-process, http or grpc)", proto)
}

// inProcess is a downstream called directly; a deaf request runs on a
// goroutine of its own, so that its caller can give up on it.
type inProcess struct {
	d        Downstream
	clock    clock
	received atomic.Int64
	wasted   atomic.Int64
	wg       sync.WaitGroup
}

func (t *inProcess) Proto() string { return "in-process" }

func (t *inProcess) Client(*chain.Chain) (func(context.Context) error, error) {
	return nil, errors.New("scenario: an in-process target is called through the chain's Do: use Call")
}

// Call is one request to the in-process downstream.
func (t *inProcess) Call(ctx context.Context) error {
	a := t.d(t.received.Add(1), t.clock.since())
	if a.Hang {
		<-ctx.Done()
		return ctx.Err()
	}
	done := make(chan struct{})
	var gaveUp atomic.Bool
	t.wg.Go(func() {
		time.Sleep(a.Delay)
		if gaveUp.Load() && a.Deaf {
			t.wasted.Add(1)
		}
		close(done)
	})
	select {
	case <-done:
		if a.Fail {
			return ErrDownstream
		}
		return nil
	case <-ctx.Done():
		gaveUp.Store(true)
		return ctx.Err()
	}
}

func (t *inProcess) Received() int64 { return t.received.Load() }
func (t *inProcess) Wasted() int64   { return t.wasted.Load() }
func (t *inProcess) Close()          { t.wg.Wait() }

// httpTarget is a loopback HTTP server, called through httpmw.
type httpTarget struct {
	srv   *testserver.HTTP
	clock clock
	mu    sync.Mutex
	bases []*http.Transport
}

func newHTTPTarget(d Downstream) *httpTarget {
	t := &httpTarget{}
	t.clock.reset(time.Now())
	t.srv = testserver.NewHTTP(func(n int64, _ *http.Request, _ []byte) testserver.HTTPAnswer {
		a := d(n, t.clock.since())
		status := http.StatusOK
		if a.Fail {
			status = http.StatusServiceUnavailable
		}
		return testserver.HTTPAnswer{Status: status, Delay: a.Delay, Hang: a.Hang, Deaf: a.Deaf}
	})
	return t
}

func (t *httpTarget) Proto() string { return "http" }

func (t *httpTarget) Client(c *chain.Chain) (func(context.Context) error, error) {
	base := &http.Transport{MaxIdleConnsPerHost: 64}
	tr, err := httpmw.New(base, c, httpmw.RetryAll())
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.bases = append(t.bases, base)
	t.mu.Unlock()
	client := &http.Client{Transport: tr}
	url := t.srv.URL
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		buf := make([]byte, 512)
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				break
			}
		}
		if resp.StatusCode >= 500 {
			return &httpmw.StatusError{StatusCode: resp.StatusCode}
		}
		return nil
	}, nil
}

func (t *httpTarget) Received() int64 { return t.srv.Received.Load() }
func (t *httpTarget) Wasted() int64   { return t.srv.Wasted.Load() }

func (t *httpTarget) Close() {
	t.mu.Lock()
	for _, b := range t.bases {
		b.CloseIdleConnections()
	}
	t.mu.Unlock()
	t.srv.Close()
}

// grpcTarget is a loopback gRPC server (the health service), called
// through grpcmw.
type grpcTarget struct {
	srv   *testserver.GRPC
	clock clock
	mu    sync.Mutex
	conns []*grpc.ClientConn
}

func newGRPCTarget(d Downstream) (*grpcTarget, error) {
	t := &grpcTarget{}
	t.clock.reset(time.Now())
	srv, err := testserver.NewGRPC(func(n int64, _ string) testserver.GRPCAnswer {
		a := d(n, t.clock.since())
		code := codes.OK
		if a.Fail {
			code = codes.Unavailable
		}
		return testserver.GRPCAnswer{Code: code, Delay: a.Delay, Hang: a.Hang, Deaf: a.Deaf}
	})
	if err != nil {
		return nil, err
	}
	t.srv = srv
	return t, nil
}

func (t *grpcTarget) Proto() string { return "grpc" }

func (t *grpcTarget) Client(c *chain.Chain) (func(context.Context) error, error) {
	ic, err := grpcmw.NewInterceptors(c, grpcmw.AllIdempotent(), grpcmw.UnaryOnly())
	if err != nil {
		return nil, err
	}
	conn, err := t.srv.Dial(ic.DialOptions()...)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.conns = append(t.conns, conn)
	t.mu.Unlock()
	client := healthpb.NewHealthClient(conn)
	return func(ctx context.Context) error {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}, nil
}

func (t *grpcTarget) Received() int64 { return t.srv.Received.Load() }
func (t *grpcTarget) Wasted() int64   { return t.srv.Wasted.Load() }

func (t *grpcTarget) Close() {
	t.mu.Lock()
	for _, c := range t.conns {
		_ = c.Close()
	}
	t.mu.Unlock()
	t.srv.Stop()
}

// clock is the time a target's downstream counts from, reset when an
// experiment starts.
type clock struct{ start atomic.Pointer[time.Time] }

func (c *clock) reset(t time.Time)    { c.start.Store(&t) }
func (c *clock) since() time.Duration { return time.Since(*c.start.Load()) }

// through chains ps and returns the chain and the function that makes
// one request to target through it: the chain's Do around the in-process
// downstream, or the adapter's client.
func through(target Target, ps ...chain.Policy) (*chain.Chain, func(context.Context) error, error) {
	c, err := chain.New(ps...)
	if err != nil {
		return nil, nil, err
	}
	if t, ok := target.(*inProcess); ok {
		return c, func(ctx context.Context) error { return c.Do(ctx, t.Call) }, nil
	}
	do, err := target.Client(c)
	return c, do, err
}
