package grpcmw_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fakeStream is a stream that no server backs: sends succeed, and RecvMsg
// fails with Unavailable, once the client has closed its send side if
// closed is not nil.
type fakeStream struct {
	grpc.ClientStream
	ctx    context.Context
	closed chan struct{} // closed by CloseSend
}

func (f *fakeStream) Context() context.Context     { return f.ctx }
func (f *fakeStream) SendMsg(any) error            { return nil }
func (f *fakeStream) Header() (metadata.MD, error) { return nil, nil }
func (f *fakeStream) Trailer() metadata.MD         { return nil }
func (f *fakeStream) CloseSend() error {
	if f.closed != nil {
		close(f.closed)
	}
	return nil
}
func (f *fakeStream) RecvMsg(any) error {
	if f.closed != nil {
		<-f.closed
	}
	return status.Error(codes.Unavailable, "fake stream")
}

var serverStreaming = &grpc.StreamDesc{ServerStreams: true}

// firstUnavailable answers the first call Unavailable, the others OK.
func firstUnavailable(n int64, _ string) testserver.GRPCAnswer {
	if n == 1 {
		return testserver.GRPCAnswer{Code: codes.Unavailable}
	}
	return testserver.GRPCAnswer{}
}

func payload(n int) *testpb.StreamingInputCallRequest {
	return &testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, n)}}
}

// eofSends is a stream whose sends fail with io.EOF, as grpc-go's do once
// the server has ended the stream.
type eofSends struct{ grpc.ClientStream }

func (eofSends) SendMsg(any) error { return io.EOF }

// TestStreamReplaySendEOFStillRetries: a retry whose replayed send meets
// the end of the stream (io.EOF) takes the stream's real status from
// RecvMsg, and retries it, instead of ending the call with a bare io.EOF.
func TestStreamReplaySendEOFStillRetries(t *testing.T) {
	srv := must(testserver.NewGRPC(func(n int64, _ string) testserver.GRPCAnswer {
		switch n {
		case 1:
			// After reading everything: the caller's sends all succeed, and
			// the failure reaches it at CloseAndRecv.
			return testserver.GRPCAnswer{Code: codes.Unavailable, FailAtEnd: true}
		case 2:
			return testserver.GRPCAnswer{Code: codes.Unavailable} // the replay finds it ended
		}
		return testserver.GRPCAnswer{}
	}))
	defer srv.Stop()
	var streams atomic.Int32
	inner := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err == nil && streams.Add(1) == 2 {
			return eofSends{cs}, nil // the first retry's replay finds the stream ended
		}
		return cs, err
	}
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 100}))
	c := must(chain.New(threeAttempts(), b))
	conn := must(srv.Dial(grpc.WithChainStreamInterceptor(must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).Stream(), inner)))
	defer conn.Close()
	st := must(testpb.NewTestServiceClient(conn).StreamingInputCall(context.Background()))
	for range 3 {
		if err := st.Send(payload(10 << 10)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := st.CloseAndRecv()
	if err != nil || resp.GetAggregatedPayloadSize() != 30<<10 || srv.Received.Load() != 3 {
		t.Errorf("got %d bytes, %v, after %d calls; want 30 KiB on the 3rd call", resp.GetAggregatedPayloadSize(), err, srv.Received.Load())
	}
	if cn := b.Counts(); cn.Failures != 2 || cn.Successes != 1 {
		t.Errorf("breaker counts %+v, want 2 failures and 1 success", cn)
	}
}

// TestStreamSendEOFEndsRetries: a send that meets the end of the stream
// gets io.EOF, as from grpc-go, and the stream is no longer retried: its
// caller stops sending there, and a retry would replay a truncated upload
// and could succeed with it. A stream the server ended well keeps what it
// read, and says so.
func TestStreamSendEOFEndsRetries(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []grpcmw.Option
		answer func(int64, string) testserver.GRPCAnswer
		code   codes.Code // of CloseAndRecv
	}{
		{"idempotent", []grpcmw.Option{grpcmw.AllIdempotent()}, firstUnavailable, codes.Unavailable},
		{"buffer small", []grpcmw.Option{grpcmw.AllIdempotent(), grpcmw.StreamBuffer(4, 64<<10)}, firstUnavailable, codes.Unavailable},
		{"not idempotent", nil, firstUnavailable, codes.Unavailable},
		{"answered early", []grpcmw.Option{grpcmw.AllIdempotent()}, func(int64, string) testserver.GRPCAnswer {
			return testserver.GRPCAnswer{ReadOnly: 1}
		}, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := testserver.NewGRPCBufconn(tc.answer)
				defer srv.Stop()
				conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(threeAttempts())), tc.opts...)).DialOptions()...))
				defer conn.Close()
				st := must(testpb.NewTestServiceClient(conn).StreamingInputCall(context.Background()))
				accepted := 0
				for range 10 {
					time.Sleep(10 * time.Millisecond) // the server has answered by now
					if err := st.Send(payload(100)); err == io.EOF {
						break // what grpc-go's callers do
					} else if err != nil {
						t.Fatal(err)
					}
					accepted++
				}
				resp, err := st.CloseAndRecv()
				if accepted == 10 || status.Code(err) != tc.code || srv.Received.Load() != 1 {
					t.Errorf("%d of 10 sends accepted, then %v after %d calls; want io.EOF before the end, then %v after 1 call", accepted, err, srv.Received.Load(), tc.code)
				}
				if err == nil && int(resp.GetAggregatedPayloadSize()) != 100*min(accepted, 1) {
					t.Errorf("success with %d bytes read after %d sends accepted", resp.GetAggregatedPayloadSize(), accepted)
				}
			})
		})
	}
}

// TestStreamSendErrorFinishesPermit: a send that fails on the client's
// side (over grpc.MaxCallSendMsgSize) ends the stream for grpc-go, and the
// caller may stop there: the half-open breaker's probe is given back,
// neutral, and the next call is admitted.
func TestStreamSendErrorFinishesPermit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, HalfOpenProbes: 1, OpenTimeout: 50 * time.Millisecond}))
		srv := testserver.NewGRPCBufconn(firstUnavailable)
		defer srv.Stop()
		conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(b)))).DialOptions()...))
		defer conn.Close()
		client := testpb.NewTestServiceClient(conn)
		st := must(client.StreamingInputCall(context.Background()))
		if _, err := st.CloseAndRecv(); status.Code(err) != codes.Unavailable || b.State() != breaker.StateOpen {
			t.Fatalf("got %v, breaker %v; want Unavailable and open", err, b.State())
		}
		time.Sleep(60 * time.Millisecond)
		st = must(client.StreamingInputCall(context.Background(), grpc.MaxCallSendMsgSize(10)))
		if err := st.Send(payload(100)); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("send: %v, want ResourceExhausted", err)
		}
		st, err := client.StreamingInputCall(context.Background())
		if err == nil {
			_, err = st.CloseAndRecv()
		}
		if err != nil {
			t.Errorf("next call: %v; want it admitted: the probe's stream is over", err)
		}
		if cn := b.Counts(); b.State() != breaker.StateClosed || cn.Neutral != 1 || cn.Successes != 1 {
			t.Errorf("breaker %v %+v; want closed, the oversized send neutral", b.State(), cn)
		}
	})
}

// TestStreamConnCloseFinishesPermit: ClientConn.Close ends a stream with no
// RecvMsg in flight, before or after its first message: its permit is
// given back, so the half-open breaker admits a call on a new connection.
func TestStreamConnCloseFinishesPermit(t *testing.T) {
	for _, tc := range []struct {
		name string
		recv bool // receive a first message before closing
	}{{"after the first message", true}, {"before any message", false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, HalfOpenProbes: 1, OpenTimeout: 50 * time.Millisecond}))
				srv := testserver.NewGRPCBufconn(func(n int64, method string) testserver.GRPCAnswer {
					switch {
					case n == 1:
						return testserver.GRPCAnswer{Code: codes.Unavailable}
					case method == testserver.MethodWatch && tc.recv:
						return testserver.GRPCAnswer{Messages: 100, Delay: 10 * time.Millisecond}
					case method == testserver.MethodWatch:
						return testserver.GRPCAnswer{Hang: true}
					}
					return testserver.GRPCAnswer{}
				})
				defer srv.Stop()
				opts := must(grpcmw.NewInterceptors(must(chain.New(b)))).DialOptions()
				conn1 := must(srv.Dial(opts...))
				c1 := healthpb.NewHealthClient(conn1)
				_ = check(context.Background(), c1) // opens
				time.Sleep(60 * time.Millisecond)
				w := must(c1.Watch(context.Background(), &healthpb.HealthCheckRequest{}))
				if tc.recv {
					if _, err := w.Recv(); err != nil {
						t.Fatal(err)
					}
				}
				conn1.Close()
				synctest.Wait()
				conn2 := must(srv.Dial(opts...))
				defer conn2.Close()
				if err := check(context.Background(), healthpb.NewHealthClient(conn2)); err != nil {
					t.Errorf("new connection: %v, breaker %v %+v; want the call admitted", err, b.State(), b.Counts())
				}
				if cn := b.Counts(); cn.Neutral != 1 {
					t.Errorf("breaker %+v; want the closed stream neutral", cn)
				}
			})
		})
	}
}

// TestStreamHeaderThenRecv: Header may find that the stream has failed,
// and grpc-go then ends it before any RecvMsg: the breaker counts the
// failure all the same, and the RecvMsg that follows still retries.
func TestStreamHeaderThenRecv(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.NewGRPCBufconn(firstUnavailable)
		defer srv.Stop()
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 10}))
		conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(threeAttempts(), b)), grpcmw.AllIdempotent())).DialOptions()...))
		defer conn.Close()
		w := must(healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{}))
		if _, err := w.Header(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if cn := b.Counts(); cn.Failures != 1 {
			t.Errorf("after Header: breaker %+v, want the failure counted", cn)
		}
		wantThreeOnSecondCall(t, srv, w)
		if cn := b.Counts(); cn.Failures != 1 || cn.Successes != 1 {
			t.Errorf("breaker %+v, want 1 failure and 1 success", cn)
		}
	})
}

// TestStreamTimeouts: the chain's timeouts bound a stream's creation, not
// the wait for its first message: a subscription whose first event comes
// after the attempt timeout gets it. FirstMessageTimeout bounds that wait,
// whether or not a RecvMsg waits, and is a failure inside every breaker.
// For unary calls, an attempt timeout inside the breaker is a failure and
// one outside it neutral.
func TestStreamTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.NewGRPCBufconn(func(int64, string) testserver.GRPCAnswer {
			return testserver.GRPCAnswer{Delay: 500 * time.Millisecond, Messages: 1}
		})
		defer srv.Stop()
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
		conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(b, must(timeout.New(100*time.Millisecond)))))).DialOptions()...))
		defer conn.Close()
		start := time.Now()
		w := must(healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{}))
		if _, err := w.Recv(); err != nil || time.Since(start) != 500*time.Millisecond {
			t.Errorf("first event: %v after %v; want it after 500ms", err, time.Since(start))
		}
		if _, err := w.Recv(); err != io.EOF {
			t.Errorf("got %v, want io.EOF", err)
		}
		if cn := b.Counts(); cn.Failures != 0 || cn.Successes != 1 || b.State() != breaker.StateClosed {
			t.Errorf("breaker %v %+v, want 1 success", b.State(), cn)
		}
	})
	for _, tc := range []struct {
		name  string
		outer bool // the chain's timeout outside the breaker
		recv  bool // a RecvMsg waits
	}{
		{"inner, receiving", false, true},
		{"inner, not receiving", false, false},
		{"outer, receiving", true, true},
		{"outer, not receiving", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := testserver.NewGRPCBufconn(func(int64, string) testserver.GRPCAnswer { return testserver.GRPCAnswer{Hang: true} })
				defer srv.Stop()
				newChain := func(b *breaker.Breaker) *chain.Chain {
					if tc.outer {
						return must(chain.New(must(timeout.New(50*time.Millisecond)), b))
					}
					return must(chain.New(b, must(timeout.New(50*time.Millisecond))))
				}
				bu := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
				bs := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
				cu := must(srv.Dial(must(grpcmw.NewInterceptors(newChain(bu))).DialOptions()...))
				cs := must(srv.Dial(must(grpcmw.NewInterceptors(newChain(bs), grpcmw.FirstMessageTimeout(50*time.Millisecond))).DialOptions()...))
				defer cu.Close()
				defer cs.Close()
				if err := check(context.Background(), healthpb.NewHealthClient(cu)); status.Code(err) != codes.DeadlineExceeded {
					t.Fatalf("unary: %v", err)
				}
				wantUnary := breaker.StateOpen
				if tc.outer {
					wantUnary = breaker.StateClosed
				}
				if bu.State() != wantUnary {
					t.Errorf("unary leaves the breaker %v %+v; want %v", bu.State(), bu.Counts(), wantUnary)
				}
				start := time.Now()
				w := must(healthpb.NewHealthClient(cs).Watch(context.Background(), &healthpb.HealthCheckRequest{}))
				if !tc.recv {
					time.Sleep(time.Second)
					synctest.Wait()
					if cn := bs.Counts(); cn.Failures != 1 {
						t.Errorf("stream timed out without a RecvMsg: breaker %+v, want its failure", cn)
					}
				}
				_, err := w.Recv()
				if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, timeout.ErrTimeout) {
					t.Errorf("stream: %v, want DeadlineExceeded matching timeout.ErrTimeout", err)
				}
				if took := time.Since(start); tc.recv && took != 50*time.Millisecond {
					t.Errorf("stream: failed after %v, want 50ms", took)
				}
				if bs.State() != breaker.StateOpen {
					t.Errorf("a stream leaves the breaker %v %+v; want open", bs.State(), bs.Counts())
				}
			})
		})
	}
}

// TestStreamCreationBoundedByChainTimeout: the chain's timeout bounds the
// creation of a stream, which can block (grpc.WaitForReady on a server
// that does not answer), as it bounds a unary call; the caller is told
// Unavailable (matching timeout.ErrTimeout), not DeadlineExceeded: its own
// deadline has not passed, and a client library that retries Unavailable
// (etcd's clientv3 for Watch) keeps its stream instead of ending it.
func TestStreamCreationBoundedByChainTimeout(t *testing.T) {
	srv := must(testserver.NewGRPC(always(codes.OK)))
	srv.Stop() // nobody listens
	c := must(chain.New(must(timeout.New(100 * time.Millisecond))))
	conn := must(srv.Dial(must(grpcmw.NewInterceptors(c)).DialOptions()...))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := client.Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if took := time.Since(start); took > time.Second || status.Code(err) != codes.Unavailable || !errors.Is(err, timeout.ErrTimeout) {
		t.Errorf("stream creation: %v after %v; want Unavailable, matching timeout.ErrTimeout, after 100ms", err, took)
	}

	// In virtual time: each attempt's creation takes exactly the timeout,
	// counts as a failure, and is retried.
	synctest.Test(t, func(t *testing.T) {
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 10}))
		icpt := must(grpcmw.NewInterceptors(must(chain.New(threeAttempts(), b, must(timeout.New(100*time.Millisecond)))), grpcmw.AllIdempotent())).Stream()
		calls := 0
		start := time.Now()
		_, err := icpt(context.Background(), serverStreaming, nil, "/s/M", func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
			calls++
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		})
		if took := time.Since(start); took != 302*time.Millisecond || calls != 3 || status.Code(err) != codes.Unavailable {
			t.Errorf("%v after %v and %d attempts; want Unavailable after 3 × 100ms + 2 × 1ms", err, took, calls)
		}
		if cn := b.Counts(); cn.Failures != 3 {
			t.Errorf("breaker %+v, want 3 failures", cn)
		}
	})
}

// TestStreamCanceledDuringCreation: the caller's context ending while the
// stream is created is neutral, whatever the stream; the race detector
// checks the interceptor against its own watchers.
func TestStreamCanceledDuringCreation(t *testing.T) {
	t.Run("fake stream", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1}))
			icpt := must(grpcmw.NewInterceptors(must(chain.New(b)))).Stream()
			ctx, cancel := context.WithCancel(context.Background())
			cs, err := icpt(ctx, serverStreaming, nil, "/s/M", func(c context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
				cancel()
				return &fakeStream{ctx: c}, nil
			})
			synctest.Wait()
			if cs == nil || err != nil || b.Counts().Neutral != 1 {
				t.Errorf("%v, breaker %+v; want a stream, neutral", err, b.Counts())
			}
		})
	})
	t.Run("grpc stream", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The server waits a second before its first message: the
			// cancellation comes first.
			srv := testserver.NewGRPCBufconn(func(int64, string) testserver.GRPCAnswer { return testserver.GRPCAnswer{Delay: time.Second} })
			defer srv.Stop()
			ctx, cancel := context.WithCancel(context.Background())
			inner := func(c context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				cs, err := streamer(c, desc, cc, method, opts...)
				cancel()
				return cs, err
			}
			b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1}))
			conn := must(srv.Dial(grpc.WithChainStreamInterceptor(must(grpcmw.NewInterceptors(must(chain.New(b)))).Stream(), inner)))
			defer conn.Close()
			w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
			if err == nil {
				_, err = w.Recv()
			}
			synctest.Wait()
			if status.Code(err) != codes.Canceled || b.State() != breaker.StateClosed || b.Counts().Neutral != 1 {
				t.Errorf("%v, breaker %v %+v; want Canceled, neutral", err, b.State(), b.Counts())
			}
		})
	})
}

// TestStreamBufferBoundedByFlowControl: StreamBuffer refuses a replay that
// could block on HTTP/2 flow control, naming the option.
func TestStreamBufferBoundedByFlowControl(t *testing.T) {
	for _, tc := range []struct {
		msgs, bytes int
		ok          bool
	}{{16, 64 << 10, true}, {1024, 100, true}, {16, 64<<10 + 1, false}, {1025, 100, false}} {
		ic, err := grpcmw.NewInterceptors(must(chain.New(fiveConsecutive())), grpcmw.StreamBuffer(tc.msgs, tc.bytes))
		if ok := err == nil; ok != tc.ok || !ok && !strings.Contains(err.Error(), "StreamBuffer(") {
			t.Errorf("StreamBuffer(%d, %d): %v", tc.msgs, tc.bytes, err)
		}
		if err != nil {
			continue
		}
		icpt := ic.Stream()
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := icpt(ctx, serverStreaming, nil, "/s/M", func(c context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
			return &fakeStream{ctx: c}, nil
		}); err != nil {
			t.Errorf("StreamBuffer(%d, %d): a stream got %v", tc.msgs, tc.bytes, err)
		}
		cancel()
	}
}

// TestStreamUnsizedMessageEndsRetries: a message whose size is unknown (not
// a proto message) could make the replay too large, so it ends the
// stream's retries, as an overflow does.
func TestStreamUnsizedMessageEndsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := must(grpcmw.NewInterceptors(must(chain.New(threeAttempts())), grpcmw.AllIdempotent())).Stream()
		for _, tc := range []struct {
			msg   any
			calls int
		}{{&healthpb.HealthCheckRequest{Service: "s"}, 3}, {"not a proto message", 1}} {
			calls := 0
			cs, err := icpt(context.Background(), serverStreaming, nil, "/s/M", func(c context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
				calls++
				return &fakeStream{ctx: c, closed: make(chan struct{})}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			_ = cs.SendMsg(tc.msg)
			_ = cs.CloseSend()
			if err := cs.RecvMsg(&healthpb.HealthCheckResponse{}); status.Code(err) != codes.Unavailable || calls != tc.calls {
				t.Errorf("%T: %v after %d attempts, want Unavailable after %d", tc.msg, err, calls, tc.calls)
			}
		}
	})
}

// failAfterClose is a first attempt that takes every message and fails
// with Unavailable once the client has closed its send side.
func failAfterClose(ctx context.Context) grpc.ClientStream {
	return &fakeStream{ctx: ctx, closed: make(chan struct{})}
}

// TestStreamRetryReplayDoesNotBlockBidi: a retry replays a bidi call's
// sends before reading any response; against a server that answers each
// request with 256 KiB as it reads, the replay (bounded by StreamBuffer)
// must not block on flow control while one goroutine sends and another
// receives.
func TestStreamRetryReplayDoesNotBlockBidi(t *testing.T) {
	srv := must(testserver.NewGRPC(always(codes.OK)))
	defer srv.Stop()
	var n atomic.Int32
	inner := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if n.Add(1) == 1 {
			return failAfterClose(ctx), nil
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
	c := must(chain.New(threeAttempts()))
	conn := must(srv.Dial(grpc.WithChainStreamInterceptor(must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).Stream(), inner)))
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st := must(testpb.NewTestServiceClient(conn).FullDuplexCall(ctx))
	const msgs = 16 // the default buffer: 16 messages, 64 KiB
	sendErr := make(chan error, 1)
	go func() {
		req := &testpb.StreamingOutputCallRequest{
			ResponseParameters: []*testpb.ResponseParameters{{Size: 256 << 10}},
			Payload:            &testpb.Payload{Body: make([]byte, 4000)},
		}
		for range msgs {
			if err := st.Send(req); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- st.CloseSend()
	}()
	got := 0
	var err error
	for {
		if _, err = st.Recv(); err != nil {
			break
		}
		got++
	}
	if err != io.EOF || got != msgs || n.Load() != 2 {
		t.Errorf("received %d responses, then %v, in %d attempts; want %d, then EOF, in 2", got, err, n.Load(), msgs)
	}
	if err := <-sendErr; err != nil {
		t.Errorf("send: %v", err)
	}
}

// TestStreamPushbackIsTheFailedAttempts: an attempt whose stream could not
// be created has no pushback of its own; it does not reuse the previous
// stream's.
func TestStreamPushbackIsTheFailedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.NewGRPCBufconn(func(n int64, _ string) testserver.GRPCAnswer {
			if n == 1 {
				return testserver.GRPCAnswer{Code: codes.Unavailable, PushbackMs: "300"}
			}
			return testserver.GRPCAnswer{}
		})
		defer srv.Stop()
		var streams atomic.Int32
		inner := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if streams.Add(1) == 2 {
				return nil, status.Error(codes.Unavailable, "no stream")
			}
			return streamer(ctx, desc, cc, method, opts...)
		}
		c := must(chain.New(threeAttempts()))
		conn := must(srv.Dial(grpc.WithChainStreamInterceptor(must(grpcmw.NewInterceptors(c, grpcmw.AllIdempotent())).Stream(), inner)))
		defer conn.Close()
		start := time.Now()
		w := must(healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{}))
		_, err := w.Recv()
		if took := time.Since(start); err != nil || took != 301*time.Millisecond {
			t.Errorf("%v after %v; want a message after the 300ms pushback and a 1ms backoff", err, took)
		}
		for err == nil {
			_, err = w.Recv()
		}
	})
}

// TestStreamOverflowIsNotRetried: an upload larger than the buffer is not
// retried, but still works; one within it is.
func TestStreamOverflowIsNotRetried(t *testing.T) {
	srv := must(testserver.NewGRPC(func(n int64, _ string) testserver.GRPCAnswer {
		if n == 1 || n == 3 {
			// After reading everything, so that no send meets the end of
			// the stream (which would end the retries too).
			return testserver.GRPCAnswer{Code: codes.Unavailable, FailAtEnd: true}
		}
		return testserver.GRPCAnswer{}
	}))
	defer srv.Stop()
	conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(threeAttempts())), grpcmw.AllIdempotent(), grpcmw.StreamBuffer(2, 64<<10))).DialOptions()...))
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)
	upload := func(k int) (int32, error) {
		st := must(client.StreamingInputCall(context.Background()))
		for range k {
			_ = st.Send(payload(10))
		}
		r, err := st.CloseAndRecv()
		return r.GetAggregatedPayloadSize(), err
	}
	if _, err := upload(3); status.Code(err) != codes.Unavailable {
		t.Errorf("3 messages, over the buffer: %v, want Unavailable, not retried", err)
	}
	if n, err := upload(3); err != nil || n != 30 {
		t.Errorf("3 messages: %d, %v", n, err)
	}
	if n, err := upload(2); err != nil || n != 20 || srv.Received.Load() != 4 {
		t.Errorf("2 messages: %d, %v after %d calls; want retried, 4 calls", n, err, srv.Received.Load())
	}
}

// TestStreamCallerEndsAreNeutral: on a stream, a caller error does not
// trip the breaker (a success), the caller's deadline and cancellation are
// neutral, and a rejection is Unavailable matching breaker.ErrOpen.
func TestStreamCallerEndsAreNeutral(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.NewGRPCBufconn(func(n int64, _ string) testserver.GRPCAnswer {
			switch n {
			case 1:
				return testserver.GRPCAnswer{Code: codes.NotFound}
			case 2:
				return testserver.GRPCAnswer{Hang: true}
			}
			return testserver.GRPCAnswer{Messages: 100, Delay: 10 * time.Millisecond}
		})
		defer srv.Stop()
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
		conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(b)))).DialOptions()...))
		defer conn.Close()
		client := healthpb.NewHealthClient(conn)
		w := must(client.Watch(context.Background(), &healthpb.HealthCheckRequest{}))
		if _, err := w.Recv(); status.Code(err) != codes.NotFound {
			t.Errorf("got %v, want NotFound", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		w = must(client.Watch(ctx, &healthpb.HealthCheckRequest{}))
		if _, err := w.Recv(); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("got %v, want the caller's DeadlineExceeded", err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		w = must(client.Watch(ctx, &healthpb.HealthCheckRequest{}))
		if _, err := w.Recv(); err != nil {
			t.Fatal(err)
		}
		cancel() // and never receives again
		synctest.Wait()
		if cn := b.Counts(); b.State() != breaker.StateClosed || cn.Successes != 1 || cn.Neutral != 2 {
			t.Errorf("breaker %v %+v; want closed, 1 success and 2 neutral", b.State(), cn)
		}

		b2 := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
		srv2 := testserver.NewGRPCBufconn(always(codes.Unavailable))
		defer srv2.Stop()
		conn2 := must(srv2.Dial(must(grpcmw.NewInterceptors(must(chain.New(b2)))).DialOptions()...))
		defer conn2.Close()
		client2 := healthpb.NewHealthClient(conn2)
		w = must(client2.Watch(context.Background(), &healthpb.HealthCheckRequest{}))
		_, err := w.Recv()
		_, err2 := client2.Watch(context.Background(), &healthpb.HealthCheckRequest{})
		if status.Code(err) != codes.Unavailable || status.Code(err2) != codes.Unavailable || !errors.Is(err2, breaker.ErrOpen) {
			t.Errorf("got %v, then %v; want Unavailable, then Unavailable matching ErrOpen", err, err2)
		}
	})
}

// TestConnCloseDuringCallIsNeutral: the caller closing the connection while
// a call waits (a stream's Recv, a unary call) says nothing of the
// downstream: neither a success, which could close a half-open breaker
// untested, nor a failure.
func TestConnCloseDuringCallIsNeutral(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
		retry  bool
	}{{"stream", true, false}, {"stream, retry", true, true}, {"unary", false, false}, {"unary, retry", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 10}))
				srv := testserver.NewGRPCBufconn(func(int64, string) testserver.GRPCAnswer { return testserver.GRPCAnswer{Hang: true} })
				defer srv.Stop()
				c, opts := must(chain.New(b)), []grpcmw.Option(nil)
				if tc.retry {
					c, opts = must(chain.New(threeAttempts(), b)), []grpcmw.Option{grpcmw.AllIdempotent()}
				}
				conn := must(srv.Dial(must(grpcmw.NewInterceptors(c, opts...)).DialOptions()...))
				client := healthpb.NewHealthClient(conn)
				errc := make(chan error, 1)
				go func() {
					if tc.stream {
						w, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
						if err == nil {
							_, err = w.Recv()
						}
						errc <- err
						return
					}
					_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
					errc <- err
				}()
				time.Sleep(10 * time.Millisecond)
				synctest.Wait()
				conn.Close()
				err := <-errc
				synctest.Wait()
				if cn := b.Counts(); cn.Neutral != 1 || cn.Successes+cn.Failures != 0 || srv.Received.Load() != 1 {
					t.Errorf("%v after %d calls; breaker %+v; want one call, neutral", err, srv.Received.Load(), cn)
				}
			})
		})
	}
}

// TestSizeLimits: a request over grpc.MaxCallSendMsgSize never leaves the
// client: grpc-go refuses it with ResourceExhausted, and callguard, seeing
// the request is over the call's limit, makes it neutral and does not
// retry it. A response over grpc.MaxCallRecvMsgSize is refused by the
// client with the same code as a server's own ResourceExhausted, and
// nothing structural tells them apart: it counts as a failure, not
// retried, like any ResourceExhausted without pushback.
func TestSizeLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: time.Hour}))
		srv := testserver.NewGRPCBufconn(always(codes.OK))
		defer srv.Stop()
		conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(threeAttempts(), b)), grpcmw.AllIdempotent())).DialOptions()...))
		defer conn.Close()
		client := healthpb.NewHealthClient(conn)
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "0123456789"}, grpc.MaxCallSendMsgSize(5))
		if status.Code(err) != codes.ResourceExhausted || srv.Received.Load() != 0 {
			t.Errorf("unary over the send limit: %v after %d calls; want ResourceExhausted, none sent", err, srv.Received.Load())
		}
		if cn := b.Counts(); cn.Failures != 0 || cn.Neutral != 1 {
			t.Errorf("breaker %+v after the send limit; want 1 neutral call", cn)
		}
		_, err = client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.MaxCallRecvMsgSize(1))
		if status.Code(err) != codes.ResourceExhausted || srv.Received.Load() != 1 {
			t.Errorf("unary over the receive limit: %v after %d calls; want ResourceExhausted after 1", err, srv.Received.Load())
		}
		w := must(client.Watch(context.Background(), &healthpb.HealthCheckRequest{}, grpc.MaxCallRecvMsgSize(1)))
		if _, err := w.Recv(); status.Code(err) != codes.ResourceExhausted || srv.Received.Load() != 2 {
			t.Errorf("stream over the receive limit: %v after %d calls; want ResourceExhausted after 2", err, srv.Received.Load())
		}
		if cn := b.Counts(); cn.Failures != 2 || cn.Neutral != 1 {
			t.Errorf("breaker %v %+v; want 2 failures and 1 neutral call", b.State(), cn)
		}
	})
}

// watchFailingOnce opens a Watch, through a chain of r, on a bufconn
// server whose first call fails with Unavailable; stop ends both.
func watchFailingOnce(r *retry.Policy) (srv *testserver.GRPC, w healthpb.Health_WatchClient, stop func()) {
	srv = testserver.NewGRPCBufconn(firstUnavailable)
	conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(r)), grpcmw.AllIdempotent())).DialOptions()...))
	w = must(healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{}))
	return srv, w, func() { conn.Close(); srv.Stop() }
}

// slowRetry waits 1 s between its 3 attempts.
func slowRetry() *retry.Policy {
	return must(retry.New(retry.MaxAttempts(3), retry.Constant(time.Second), retry.Jitter(0)))
}

// TestStreamContextCommits: once the caller has the stream's Context, the
// stream is not retried (a retry would cancel that context under it), as
// grpc-go does; Header and Context do not wait for a retry in progress.
func TestStreamContextCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, w, stop := watchFailingOnce(threeAttempts())
		defer stop()
		ctx := w.Context()
		if _, err := w.Recv(); status.Code(err) != codes.Unavailable || srv.Received.Load() != 1 || ctx.Err() == nil {
			t.Errorf("after Context: %v after %d calls, context %v; want Unavailable from the one call, its context ended", err, srv.Received.Load(), ctx.Err())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		srv, w, stop := watchFailingOnce(slowRetry())
		defer stop()
		done := make(chan error, 1)
		go func() { _, err := w.Recv(); done <- err }()
		time.Sleep(100 * time.Millisecond) // the Recv now waits out the retry's 1 s backoff
		start := time.Now()
		_, _ = w.Header()
		_ = w.Trailer()
		if waited := time.Since(start); waited != 0 {
			t.Errorf("Header and Trailer waited %v for the retry in progress", waited)
		}
		if err := <-done; err != nil || srv.Received.Load() != 2 {
			t.Errorf("the retried Recv: %v after %d calls, want a message from the 2nd", err, srv.Received.Load())
		}
	})
	// Context called during the retry's backoff: the retry is not made,
	// and the context the caller got has ended with the stream.
	synctest.Test(t, func(t *testing.T) {
		srv, w, stop := watchFailingOnce(slowRetry())
		defer stop()
		done := make(chan error, 1)
		go func() { _, err := w.Recv(); done <- err }()
		time.Sleep(100 * time.Millisecond) // in the backoff
		ctx := w.Context()
		err := <-done
		if err == nil || ctx.Err() == nil || srv.Received.Load() != 1 {
			t.Errorf("Context during the backoff: Recv %v after %d calls, context %v; want the stream ended after 1 call, with its context", err, srv.Received.Load(), ctx.Err())
		}
	})
}

// TestStreamHeaderThenRecvInBubble: a stream used in a synctest bubble lets
// virtual time pass while the retry that Header's discovery leads to waits
// out its backoff (no lock is held during a retry's wait, and a goroutine
// waiting for the retry to end waits on a sync.Cond: durably blocked).
func TestStreamHeaderThenRecvInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, w, stop := watchFailingOnce(threeAttempts())
		defer stop()
		_, _ = w.Header()
		wantThreeOnSecondCall(t, srv, w)
	})
}

// TestStreamRetryWaitHoldsNoLock: while a Recv waits out a retry's backoff,
// or a breaker's open stay (RetryWhenOpen), the stream's lock is free:
// Header, Trailer, CloseSend and Context from another goroutine return at
// once, in virtual time, and the retry goes on (or, after Context, ends
// the stream when the wait is over). A SendMsg after CloseSend, which
// grpc-go refuses, waits for the retry's end, and the bubble's clock runs
// meanwhile.
func TestStreamRetryWaitHoldsNoLock(t *testing.T) {
	for _, wait := range []struct {
		name  string
		chain func() *chain.Chain // whose retry waits after the first attempt fails
		until time.Duration       // the end of the wait, from the start
	}{
		{"backoff", func() *chain.Chain { return must(chain.New(slowRetry())) }, time.Second},
		// The open stay ends just after its second: the breaker's
		// bridge.OpenAfter.Until is the first instant it admits again.
		{"breaker open", func() *chain.Chain {
			r := must(retry.New(retry.MaxAttempts(3), retry.Constant(time.Millisecond), retry.Jitter(0), retry.RetryWhenOpen()))
			b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Second}))
			return must(chain.New(r, b))
		}, time.Second + time.Nanosecond},
	} {
		for _, tc := range []struct {
			name  string
			call  func(w healthpb.Health_WatchClient) error // 100 ms into the wait
			waits bool                                      // the call returns when the retry ends
			code  codes.Code                                // the call's
			recv  codes.Code                                // the waiting Recv's (OK: a message)
			calls int64                                     // the server's, when the Recv returns
		}{
			{"Header, Trailer, CloseSend", func(w healthpb.Health_WatchClient) error {
				_, _ = w.Header()
				_ = w.Trailer()
				return w.CloseSend()
			}, false, codes.OK, codes.OK, 2},
			{"Context", func(w healthpb.Health_WatchClient) error {
				_ = w.Context()
				return nil
			}, false, codes.OK, codes.Unavailable, 1},
			{"SendMsg after CloseSend", func(w healthpb.Health_WatchClient) error {
				return w.SendMsg(&healthpb.HealthCheckRequest{})
			}, true, codes.Internal, codes.OK, 2},
		} {
			t.Run(wait.name+"/"+tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					srv := testserver.NewGRPCBufconn(firstUnavailable)
					defer srv.Stop()
					conn := must(srv.Dial(must(grpcmw.NewInterceptors(wait.chain(), grpcmw.AllIdempotent())).DialOptions()...))
					defer conn.Close()
					w := must(healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{}))
					start := time.Now()
					type result struct {
						err   error
						took  time.Duration
						calls int64
					}
					done := make(chan result, 1)
					go func() {
						_, err := w.Recv()
						done <- result{err, time.Since(start), srv.Received.Load()}
					}()
					time.Sleep(100 * time.Millisecond)
					callStart := time.Now()
					err := tc.call(w)
					want := time.Duration(0)
					if tc.waits {
						want = wait.until - 100*time.Millisecond
					}
					if took := time.Since(callStart); took != want || status.Code(err) != tc.code {
						t.Errorf("the call: %v after %v; want %v after %v", err, took, tc.code, want)
					}
					r := <-done
					if status.Code(r.err) != tc.recv || r.took != wait.until || r.calls != tc.calls {
						t.Errorf("the Recv: %v after %v and %d calls; want %v after %v and %d calls", r.err, r.took, r.calls, tc.recv, wait.until, tc.calls)
					}
				})
			})
		}
	}
}

// TestStreamStatusAfterCommitAndEnd: the caller gets the status of the
// failure that ended the stream: the last attempt's when Context stops a
// retry during its backoff (also after FirstMessageTimeout), and the same
// status again from a RecvMsg after the end.
func TestStreamStatusAfterCommitAndEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.NewGRPCBufconn(func(n int64, _ string) testserver.GRPCAnswer {
			switch n {
			case 1:
				return testserver.GRPCAnswer{Code: codes.Unavailable}
			case 2:
				return testserver.GRPCAnswer{Code: codes.ResourceExhausted}
			}
			return testserver.GRPCAnswer{}
		})
		defer srv.Stop()
		conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(slowRetry())), grpcmw.AllIdempotent())).DialOptions()...))
		defer conn.Close()
		w := must(healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{}))
		done := make(chan error, 1)
		go func() { _, err := w.Recv(); done <- err }()
		time.Sleep(1500 * time.Millisecond) // in the 2nd backoff, after attempt 2 failed
		_ = w.Context()
		if err := <-done; status.Code(err) != codes.ResourceExhausted || srv.Received.Load() != 2 {
			t.Errorf("got %v after %d calls; want the 2nd attempt's ResourceExhausted", err, srv.Received.Load())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.NewGRPCBufconn(func(int64, string) testserver.GRPCAnswer { return testserver.GRPCAnswer{Hang: true} })
		defer srv.Stop()
		conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(slowRetry())), grpcmw.AllIdempotent(), grpcmw.FirstMessageTimeout(100*time.Millisecond))).DialOptions()...))
		defer conn.Close()
		w := must(healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{}))
		done := make(chan error, 1)
		go func() { _, err := w.Recv(); done <- err }()
		time.Sleep(500 * time.Millisecond) // in the backoff after the first attempt's timeout
		_ = w.Context()
		if err := <-done; status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("got %v; want FirstMessageTimeout's DeadlineExceeded", err)
		}
		if _, err := w.Recv(); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("a Recv after the end: %v; want DeadlineExceeded again", err)
		}
	})
}

// wantThreeOnSecondCall reads w to its end and wants the 3 messages of the
// server's 2nd call (the first having failed), then io.EOF.
func wantThreeOnSecondCall(t *testing.T, srv *testserver.GRPC, w healthpb.Health_WatchClient) {
	t.Helper()
	n := 0
	var err error
	for ; err == nil; n++ {
		_, err = w.Recv()
	}
	if err != io.EOF || n != 4 || srv.Received.Load() != 2 {
		t.Errorf("%d messages, then %v, after %d calls; want 3 messages on the 2nd call", n-1, err, srv.Received.Load())
	}
}

// TestStreamRetryPanicKeepsTheLock: a panic during a stream's retry (here
// in the retry's OnRetry) reaches the caller as a panic it can recover,
// not a fatal "unlock of unlocked mutex", and the stream is not left
// retrying.
func TestStreamRetryPanicKeepsTheLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := threeAttempts(retry.OnRetry(func(int, error, time.Duration) { panic("boom") }))
		_, w, stop := watchFailingOnce(r)
		defer stop()
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Errorf("recovered %v, want the OnRetry panic", p)
				}
			}()
			_, _ = w.Recv()
		}()
		done := make(chan struct{})
		go func() {
			_ = w.CloseSend()
			_, _ = w.Header()
			close(done)
		}()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Error("the stream's methods block after a panicking retry")
		}
	})
}
