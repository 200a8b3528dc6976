package interleave

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/httpmw"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// env is what a case runs against: one function per call.
type env struct {
	call    func(ctx context.Context, i int, r *result)
	reader  *sdkmetric.ManualReader
	closeFn func()
	bypass  func() error // gRPC: one pick of the channel outside the chain
}

// degrade is the fallback's answer: a success, with a body saying so.
func (cs *kase) degrade(ctx context.Context) error {
	switch cs.mode {
	case modeHTTP:
		return httpmw.Respond(ctx, &http.Response{StatusCode: http.StatusOK, Header: http.Header{"X-Attempt": {fallbackBody}},
			Trailer: http.Header{"X-Attempt": {fallbackBody}}, Body: io.NopCloser(bytes.NewReader([]byte(fallbackBody)))})
	case modeGRPC:
		if r, ok := grpcmw.Reply(ctx).(*testpb.SimpleResponse); ok {
			// The fallbacks of a policy of the user's own that runs
			// attempts at once share the caller's reply: a fallback safe
			// for concurrent use fills it under a lock of its own.
			cs.replyMu.Lock()
			r.Payload = &testpb.Payload{Body: []byte(fallbackBody)}
			cs.replyMu.Unlock()
			return nil
		}
		return errors.New("interleave: no reply to fill")
	}
	return nil
}

var errDownstream = errors.New("interleave: downstream failed")

// doEnv runs calls through chain.Do.
func (cs *kase) doEnv() *env {
	return &env{call: func(ctx context.Context, i int, r *result) {
		r.err = cs.chain.Do(ctx, func(ctx context.Context) error {
			a, ans := cs.arrive(ctx, i)
			if ans.kind == aPanic {
				cs.mu.Lock()
				a.end = cs.now()
				cs.mu.Unlock()
				cs.panicked("call")
			}
			if !cs.serve(ctx, a) {
				return ctx.Err()
			}
			if ans.kind == aOK {
				return nil
			}
			return errDownstream
		})
	}}
}

// trackedBody counts the response bodies closed.
type trackedBody struct {
	io.Reader
	cs   *kase
	once sync.Once
}

func (b *trackedBody) Close() error {
	b.once.Do(func() { b.cs.closed.Add(1) })
	return nil
}

// roundTripper is an in-process base RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func httpStatus(k akind) int {
	switch k {
	case a5xx:
		return http.StatusServiceUnavailable
	case a429:
		return http.StatusTooManyRequests
	case aBad:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// base is the in-process downstream over HTTP.
func (cs *kase) base(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	i, _ := strconv.Atoi(req.Header.Get("X-Call"))
	a, ans := cs.arrive(req.Context(), i)
	if !cs.serve(req.Context(), a) {
		return nil, req.Context().Err()
	}
	t := tag(i, a.n)
	resp := &http.Response{StatusCode: httpStatus(ans.kind), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"X-Attempt": {t}}, Trailer: http.Header{"X-Attempt": {t}}, Request: req}
	if ans.kind == a429 {
		resp.Header.Set("Retry-After", strconv.Itoa(int(cs.seed%2)))
	}
	resp.Body = &trackedBody{Reader: bytes.NewReader([]byte(t)), cs: cs}
	cs.bodies.Add(1)
	return resp, nil
}

// handler is the same downstream as an HTTP server, for loopback cases.
func (cs *kase) handler(w http.ResponseWriter, req *http.Request) {
	// read to the end, so that the server watches the connection and ends
	// the request's context when the client goes
	_, _ = io.Copy(io.Discard, req.Body)
	i, _ := strconv.Atoi(req.Header.Get("X-Call"))
	// the attempt's deadline, which HTTP does not carry, from the client:
	// an answer is live only a margin before it (see serve)
	actx := req.Context()
	if ns, err := strconv.ParseInt(req.Header.Get("X-Deadline"), 10, 64); err == nil {
		var cancel context.CancelFunc
		actx, cancel = context.WithDeadline(actx, time.Unix(0, ns))
		defer cancel()
	}
	a, ans := cs.arrive(actx, i)
	if !cs.serve(req.Context(), a) {
		return
	}
	t := tag(i, a.n)
	w.Header().Set("Trailer", "X-Attempt")
	w.Header().Set("X-Attempt", t)
	if ans.kind == a429 {
		w.Header().Set("Retry-After", "0")
	}
	w.WriteHeader(httpStatus(ans.kind))
	_, _ = io.WriteString(w, t)
	w.Header().Set("X-Attempt", t)
}

func (cs *kase) httpEnv(real bool) (*env, error) {
	var opts []httpmw.Option
	e := &env{}
	if cs.metrics {
		e.reader = sdkmetric.NewManualReader()
		opts = append(opts, httpmw.Metrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))))
	}
	var base http.RoundTripper = roundTripper(cs.base)
	url := "http://downstream.test/item"
	var srv *httptest.Server
	var hbase *http.Transport
	if real {
		srv = httptest.NewServer(http.HandlerFunc(cs.handler))
		url = srv.URL + "/item"
		hbase = &http.Transport{}
		base = roundTripper(func(req *http.Request) (*http.Response, error) {
			if dl, ok := req.Context().Deadline(); ok {
				req = req.Clone(req.Context())
				req.Header.Set("X-Deadline", strconv.FormatInt(dl.UnixNano(), 10))
			}
			return hbase.RoundTrip(req)
		})
	}
	tr, err := httpmw.New(base, cs.chain, opts...)
	if err != nil {
		if srv != nil {
			srv.Close()
		}
		return nil, err
	}
	client := &http.Client{Transport: tr}
	method := http.MethodGet
	if !cs.idempotent || cs.idemKey {
		method = http.MethodPost
	}
	e.call = func(ctx context.Context, i int, r *result) {
		var body io.Reader
		if method == http.MethodPost {
			body = bytes.NewReader([]byte("request"))
		}
		req, err := http.NewRequestWithContext(ctx, method, url, body)
		if err != nil {
			r.err = err
			return
		}
		req.Header.Set("X-Call", strconv.Itoa(i))
		if cs.idemKey {
			req.Header.Set("Idempotency-Key", "k"+strconv.Itoa(i))
		}
		resp, err := client.Do(req)
		if err != nil {
			r.err = err
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		r.status, r.body, r.header, r.trailer, r.err = resp.StatusCode, string(b), resp.Header.Get("X-Attempt"), resp.Trailer.Get("X-Attempt"), err
	}
	e.closeFn = func() {
		client.CloseIdleConnections()
		if srv != nil {
			srv.Close()
			hbase.CloseIdleConnections()
		}
	}
	return e, nil
}

// grpcServer is the downstream over gRPC.
type grpcServer struct {
	testpb.UnimplementedTestServiceServer
	cs *kase
}

func grpcCode(k akind) codes.Code {
	switch k {
	case a5xx:
		return codes.Unavailable
	case a429:
		return codes.ResourceExhausted
	case aBad:
		return codes.InvalidArgument
	}
	return codes.OK
}

func (s *grpcServer) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	cs := s.cs
	i := -1
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get("x-call")) == 1 {
		i, _ = strconv.Atoi(md.Get("x-call")[0])
	}
	sick := false
	if p, ok := peer.FromContext(ctx); ok && cs.eps != nil && p.Addr != nil {
		sick = cs.eps.isSick(p.Addr.String())
	}
	a, ans := cs.arriveAt(ctx, i, sick)
	if !cs.serve(ctx, a) {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	t := tag(i, a.n)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-attempt", t))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-attempt", t))
	if ans.kind == a429 {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", strconv.Itoa(int(cs.seed%3))))
	}
	if c := grpcCode(ans.kind); c != codes.OK {
		return nil, status.Error(c, "interleave: "+ans.kind.String())
	}
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: []byte(t)}}, nil
}

func (cs *kase) grpcEnv(real bool) (*env, error) {
	opts := []grpcmw.Option{grpcmw.UnaryOnly()}
	e := &env{}
	if cs.idempotent {
		opts = append(opts, grpcmw.AllIdempotent())
	}
	if cs.metrics {
		e.reader = sdkmetric.NewManualReader()
		opts = append(opts, grpcmw.Metrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))))
	}
	var epDial []grpc.DialOption
	var epLis []net.Listener
	if cs.eps != nil {
		var epOpts []grpcmw.Option
		var err error
		if epDial, epOpts, epLis, err = cs.epDial(); err != nil {
			return nil, err
		}
		opts = append(opts, epOpts...)
	}
	ic, err := grpcmw.NewInterceptors(cs.chain, opts...)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, &grpcServer{cs: cs})
	dial := append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	var lis net.Listener
	target := "passthrough:///bufconn"
	switch {
	case real:
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
		target = "passthrough:///" + lis.Addr().String()
	case cs.eps != nil:
		target = "interleave:///downstream"
		dial = append(dial, epDial...)
	default:
		bl := bufconn.Listen(1 << 20)
		lis = bl
		dial = append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }))
	}
	if lis != nil {
		epLis = append(epLis, lis)
	}
	for _, lis := range epLis {
		go func() { _ = srv.Serve(lis) }()
	}
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		srv.Stop()
		return nil, err
	}
	client := testpb.NewTestServiceClient(conn)
	if cs.eps != nil {
		e.bypass = func() error { return epBypass(client) }
		if cs.eps.warm {
			// every endpoint connected and READY before the first call
			conn.Connect()
			synctest.Wait()
		}
	}
	e.call = func(ctx context.Context, i int, r *result) {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-call", strconv.Itoa(i))
		var hdr, trl metadata.MD
		var p peer.Peer
		reply, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl), grpc.Peer(&p))
		r.err = err
		if reply != nil && reply.Payload != nil {
			r.body = string(reply.Payload.Body)
		}
		if v := hdr.Get("x-attempt"); len(v) > 0 {
			r.header = v[0]
		}
		if v := trl.Get("x-attempt"); len(v) > 0 {
			r.trailer = v[0]
		}
		r.peer = p.Addr != nil
	}
	e.closeFn = func() {
		_ = conn.Close()
		srv.Stop()
	}
	return e, nil
}

// runCalls makes the case's calls, at once or one after another, and waits
// for them.
func (cs *kase) runCalls(e *env) {
	var wg sync.WaitGroup
	one := func(i int) {
		cp := cs.calls[i]
		r := &result{call: i}
		cs.mu.Lock()
		cs.results[i] = r
		cs.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), callKey{}, i), cs.watchdog)
		defer cancel()
		if cp.deadline > 0 {
			var c2 context.CancelFunc
			ctx, c2 = context.WithTimeout(ctx, cp.deadline)
			defer c2()
		}
		if cp.cancelAt > 0 {
			var c3 context.CancelFunc
			ctx, c3 = context.WithCancel(ctx)
			stop := time.AfterFunc(cp.cancelAt, c3)
			defer stop.Stop()
			defer c3()
		}
		start := cs.now()
		func() {
			defer func() {
				if v := recover(); v != nil {
					r.panicked = v
				}
			}()
			e.call(ctx, i, r)
		}()
		cs.mu.Lock()
		r.start, r.end, r.done = start, cs.now(), true
		cs.mu.Unlock()
	}
	for i := range cs.calls {
		if !cs.concurrent {
			one(i)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(cs.calls[i].at)
			one(i)
		}()
	}
	wg.Wait()
}
