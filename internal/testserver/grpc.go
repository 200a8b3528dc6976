package testserver

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// The full method names the server serves.
const (
	MethodCheck  = "/grpc.health.v1.Health/Check"                 // unary
	MethodWatch  = "/grpc.health.v1.Health/Watch"                 // server-streaming
	MethodUpload = "/grpc.testing.TestService/StreamingInputCall" // client-streaming
	MethodDuplex = "/grpc.testing.TestService/FullDuplexCall"     // bidi
)

// GRPCAnswer says how the gRPC server answers one call.
type GRPCAnswer struct {
	Code       codes.Code    // OK: succeed
	Message    string        // the status message of a failure ("testserver: <code>" if empty)
	Delay      time.Duration // before answering (a stream: before each message)
	Hang       bool          // until the client gives up
	PushbackMs string        // a grpc-retry-pushback-ms trailer ("1,2": one value each)
	Messages   int           // a stream: messages to send (0: 3)
	FailAfter  int           // a stream: fail with Code after this many messages (0: at once)
	ReadOnly   int           // an upload: answer after reading this many messages (0: all)
	FailAtEnd  bool          // an upload: read every message, then fail with Code
	// Header (Check, Watch): metadata sent as the response's header
	// (Watch: at once, before any message or failure).
	Header metadata.MD
	// Deaf (Check): the Delay runs to its end even if the client has gone;
	// a call whose client had gone by then counts in Wasted.
	Deaf bool
}

func (a GRPCAnswer) message() string {
	if a.Message != "" {
		return a.Message
	}
	return "testserver: " + a.Code.String()
}

// GRPC is a gRPC server of the health service.
type GRPC struct {
	Addr     string // host:port for a TCP server, "bufconn" otherwise
	Received atomic.Int64
	Wasted   atomic.Int64 // deaf answers finished after their client had gone
	handlers sync.WaitGroup
	hmu      sync.Mutex // orders handlers.Add before Stop's Wait
	stopped  bool       // under hmu
	srv      *grpc.Server
	lis      *bufconn.Listener
	answer   func(n int64, method string) GRPCAnswer
}

// NewGRPC starts a server on 127.0.0.1:0 that answers the n-th call (from
// 1, Check and Watch counted together) as answer says.
func NewGRPC(answer func(n int64, method string) GRPCAnswer) (*GRPC, error) {
	return NewGRPCWith(answer)
}

// NewGRPCWith is NewGRPC with options of the server's own, e.g.
// grpc.MaxConcurrentStreams.
func NewGRPCWith(answer func(n int64, method string) GRPCAnswer, opts ...grpc.ServerOption) (*GRPC, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &GRPC{Addr: lis.Addr().String(), answer: answer}
	s.start(lis, opts...)
	return s, nil
}

// NewGRPCBufconn starts the server on an in-memory listener, for tests in
// virtual time (testing/synctest).
func NewGRPCBufconn(answer func(n int64, method string) GRPCAnswer) *GRPC {
	s := &GRPC{Addr: "bufconn", answer: answer, lis: bufconn.Listen(1 << 20)}
	s.start(s.lis)
	return s
}

func (s *GRPC) start(lis net.Listener, opts ...grpc.ServerOption) {
	s.srv = grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(s.srv, &health{s: s})
	testpb.RegisterTestServiceServer(s.srv, &streams{s: s})
	go func() { _ = s.srv.Serve(lis) }()
}

// Dial opens a client connection to the server with opts.
func (s *GRPC) Dial(opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	if s.lis != nil {
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return s.lis.DialContext(ctx)
		}))
		return grpc.NewClient("passthrough:///bufconn", opts...)
	}
	return grpc.NewClient("passthrough:///"+s.Addr, opts...)
}

// Stop stops the server at once, and waits for its Check handlers (a deaf
// one runs its Delay to the end).
func (s *GRPC) Stop() {
	s.srv.Stop()
	s.hmu.Lock()
	s.stopped = true
	s.hmu.Unlock()
	s.handlers.Wait()
}

type health struct {
	healthpb.UnimplementedHealthServer
	s *GRPC
}

func (h *health) answer(ctx context.Context, method string) (GRPCAnswer, error) {
	a := h.s.answer(h.s.Received.Add(1), method)
	if a.Hang {
		<-ctx.Done()
		return a, status.FromContextError(ctx.Err()).Err()
	}
	if a.PushbackMs != "" {
		md := metadata.MD{}
		for _, v := range strings.Split(a.PushbackMs, ",") {
			md.Append("grpc-retry-pushback-ms", v)
		}
		_ = grpc.SetTrailer(ctx, md)
	}
	return a, nil
}

func (h *health) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.s.hmu.Lock()
	if h.s.stopped {
		h.s.hmu.Unlock()
		return nil, status.Error(codes.Unavailable, "testserver: stopped")
	}
	h.s.handlers.Add(1) // never at once with Stop's Wait (a WaitGroup race)
	h.s.hmu.Unlock()
	defer h.s.handlers.Done()
	a, err := h.answer(ctx, MethodCheck)
	if err != nil {
		return nil, err
	}
	if a.Header != nil {
		_ = grpc.SetHeader(ctx, a.Header)
	}
	if a.Deaf {
		time.Sleep(a.Delay)
		if ctx.Err() != nil {
			h.s.Wasted.Add(1)
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	} else if !sleep(ctx, a.Delay) {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if a.Code != codes.OK {
		return nil, status.Error(a.Code, a.message())
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h *health) Watch(_ *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx := stream.Context()
	a, err := h.answer(ctx, MethodWatch)
	if err != nil {
		return err
	}
	if a.Header != nil {
		if err := stream.SendHeader(a.Header); err != nil {
			return err
		}
	}
	msgs := a.Messages
	if msgs == 0 {
		msgs = 3
	}
	for i := range msgs {
		if a.Code != codes.OK && i == a.FailAfter {
			return status.Error(a.Code, "testserver: "+a.Code.String()+" after "+strconv.Itoa(i)+" messages")
		}
		if !sleep(ctx, a.Delay) {
			return status.FromContextError(ctx.Err()).Err()
		}
		if err := stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
			return err
		}
	}
	if a.Code != codes.OK && a.FailAfter >= msgs {
		return status.Error(a.Code, "testserver: "+a.Code.String())
	}
	return nil
}

// streams serves grpc-go's interop TestService for client-streaming and
// bidi calls.
type streams struct {
	testpb.UnimplementedTestServiceServer
	s *GRPC
}

// StreamingInputCall sums the sizes of the payloads it receives.
func (t *streams) StreamingInputCall(stream testpb.TestService_StreamingInputCallServer) error {
	a := t.s.answer(t.s.Received.Add(1), MethodUpload)
	if a.Code != codes.OK && a.FailAtEnd {
		for {
			if _, err := stream.Recv(); err != nil {
				return status.Error(a.Code, "testserver: "+a.Code.String())
			}
		}
	}
	if a.Code != codes.OK {
		return status.Error(a.Code, "testserver: "+a.Code.String())
	}
	total := 0
	for n := 0; ; n++ {
		if a.ReadOnly > 0 && n == a.ReadOnly {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(total)})
		}
		req, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(total)})
		}
		if err != nil {
			return err
		}
		total += len(req.GetPayload().GetBody())
	}
}

// FullDuplexCall answers each request with a payload of the size it asks
// for, as it reads them.
func (t *streams) FullDuplexCall(stream testpb.TestService_FullDuplexCallServer) error {
	a := t.s.answer(t.s.Received.Add(1), MethodDuplex)
	if a.Code != codes.OK {
		return status.Error(a.Code, "testserver: "+a.Code.String())
	}
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		size := 0
		if ps := req.GetResponseParameters(); len(ps) > 0 {
			size = int(ps[0].GetSize())
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, size)}}); err != nil {
			return err
		}
	}
}
