package grpcmw

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/internal/telemetry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// The largest replay buffer [StreamBuffer] accepts. A retry replays what was
// sent before it reads any response, holding the stream; grpc-go blocks a
// send only once more than 64 KiB of it waits for HTTP/2 flow control (its
// per-stream write quota), and the server's stream window (64 KiB at least
// for grpc-go servers, the HTTP/2 default for others) comes on top. A replay
// within 64 KiB of messages, and their framing, therefore never blocks on a
// server that answers as it reads, where a larger one could deadlock.
const (
	maxReplayMsgs  = 1024
	maxReplayBytes = 64 << 10
)

func (cfg *config) stream() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		p, _, err := cfg.chainFor(ctx, method, cc)
		if err != nil {
			return nil, err
		}
		sp := p.streamPlan()
		if sp.err != nil {
			return nil, sp.err
		}
		idempotent, maxAttempts := cfg.callSettings(method, callOpts)
		s := &stream{
			cfg: cfg, plan: &sp.plan, ctx: ctx, desc: desc, cc: cc, method: method,
			streamer: streamer, opts: callOpts, idempotent: idempotent, maxAttempts: maxAttempts,
		}
		s.idle.L = &s.mu
		s.bufBytes = cfg.bufBytes
		if cfg.retryBuffer > 0 {
			s.bufBytes = cfg.retryBufferOf(callOpts)
		}
		var overall time.Duration
		s.first, s.firstAt, overall, s.overallAt = s.plan.times()
		if overall > 0 {
			s.deadline = time.Now().Add(overall)
			if cfg.streamDeadline {
				// The timeout bounds the whole stream, as grpc-go's
				// methodConfig timeout does: the stream's context ends
				// then. Stopped at the stream's clean end; else its timer
				// ends it (a failed stream's later RecvMsg reads it).
				s.ctx, s.stop = context.WithDeadline(ctx, s.deadline)
			}
		}
		if err = s.establish(); err != nil {
			if s.stop != nil {
				s.stop()
			}
			err = cfg.gaveUp(err, toStatus(ctx, err, s.answer))
			// Not established: the caller's span says why, as for a
			// unary call (an established stream's outcome is its last
			// attempt's span's).
			if cfg.tracing != nil {
				cfg.tracing.Ended(ctx, telemetry.Classify(ctx, err), s.attempts, err)
			}
			return nil, err
		}
		return s, nil
	}
}

// stream is a client stream whose establishment callguard guards. Its
// methods follow grpc.ClientStream's concurrency rules: one goroutine may
// send while another receives.
type stream struct {
	cfg         *config
	plan        *plan
	ctx         context.Context
	desc        *grpc.StreamDesc
	cc          *grpc.ClientConn
	method      string
	streamer    grpc.Streamer
	opts        []grpc.CallOption
	idempotent  bool
	maxAttempts int
	deadline    time.Time     // of the timeouts outside the retry and the breakers
	first       time.Duration // the soonest timeout, bounding each attempt's creation
	firstAt     int           // its position
	overallAt   int           // the position of the timeout that set deadline
	stop        func()        // with streamDeadline, ends ctx, which the deadline bounds
	bufBytes    int           // the replay buffer's bytes (StreamBuffer, or retryBuffer)

	// The calls in flight, which see how an attempt ends: recving is set
	// under mu, sending counts SendMsg calls. Atomic so that grpc.OnFinish
	// can read them without the lock; each call clears its own before it
	// looks at attempt.fin, and OnFinish sets fin before it looks at them.
	recving atomic.Bool
	sending atomic.Int32

	// The latest attempt's stream, for Header, Trailer and Context, which
	// do not wait for a retry in progress; committed: Context was called,
	// and the stream it belongs to must not be replaced by a retry (as
	// grpc-go commits an attempt then).
	curStream atomic.Pointer[grpc.ClientStream]
	committed atomic.Bool

	// The stream's state, under mu, which is never held while something
	// waits (see establish).
	mu         sync.Mutex
	idle       sync.Cond // on mu, broadcast when a retry ends
	retrying   bool      // the establishment or a retry is in progress, without the lock
	cur        *attempt  // the latest attempt that made a stream; a failed retry keeps it, and its calls keep failing
	attempts   int
	sent       []any
	sentBytes  int
	overflow   bool // sent more than the buffer holds, or the caller saw io.EOF: no more retries
	closedSend bool
	received   bool  // the first response arrived: no more retries
	finished   bool  // the final outcome is known: no more retries
	lastErr    error // the last failed attempt's error, as the retry saw it
	answer     error // the last failed attempt's own status (see answerOf): the downstream's last answer
}

// bufferLocked keeps m for a replay, while a retry may still need it.
func (s *stream) bufferLocked(m any) {
	if s.received || s.overflow || s.closedSend || s.finished {
		return
	}
	pm, ok := m.(proto.Message)
	if ok {
		s.sentBytes += proto.Size(pm)
		if s.cfg.retryBuffer > 0 {
			s.sentBytes += 5 // framed, as grpc-go's retry buffer counts
		}
		s.sent = append(s.sent, m)
	}
	// A message of unknown size could make the replay too large to send
	// without reading (see maxReplayBytes): it ends the retries too.
	if !ok || len(s.sent) > s.cfg.bufMsgs || s.sentBytes > s.bufBytes {
		s.overflow, s.sent = true, nil
	}
}

func (s *stream) SendMsg(m any) error {
	s.mu.Lock()
	for s.retrying {
		// Only a SendMsg after CloseSend, which grpc-go fails, meets a
		// retry: it goes to the stream the retry ends with.
		s.idle.Wait()
	}
	s.bufferLocked(m)
	a := s.cur
	s.sending.Add(1)
	s.mu.Unlock()
	// Not under the lock: a send blocked by flow control must not stop a
	// receiver on another goroutine. A stream is only replaced after
	// CloseSend, when no send can be in flight.
	err := a.cs.SendMsg(m)
	if err == nil {
		s.sending.Add(-1)
		if a.fin.Load() != nil {
			s.settle(a) // what ended while this call was in flight
		}
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		s.sending.Add(-1)
		s.settleLocked(a)
	}()
	if err == io.EOF {
		// The attempt's stream has ended; RecvMsg will say how. grpc-go's
		// callers stop sending here, so a retry would replay a truncated
		// upload and could succeed with it: no more retries. (Returning
		// nil instead would drop the caller's messages silently when the
		// stream ended well.)
		if a == s.cur {
			s.overflow, s.sent = true, nil
		}
		return io.EOF
	}
	// Any other error comes from the client (grpc-go turns what happens on
	// the wire into io.EOF, for RecvMsg to report): a message over the send
	// size limit, one that does not marshal, SendMsg after CloseSend.
	// grpc-go has ended the stream, and the caller may stop here without
	// calling RecvMsg. The status says nothing of the downstream's health:
	// a failure would let a client bug open the breaker, a success (as
	// NotFailure would count it) would close a half-open breaker that was
	// never tested. So the attempt is neutral (DoneNeutral), and final.
	if a == s.cur {
		s.finished = true
		s.abandonLocked(a)
	}
	return err
}

func (s *stream) CloseSend() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closedSend = true
	if s.retrying {
		// A stream is retried only once its send side is closed, and each
		// new attempt's is closed after its replay.
		return nil
	}
	err := s.cur.cs.CloseSend()
	s.armFirstLocked(s.cur)
	return err
}

func (s *stream) RecvMsg(m any) error {
	s.mu.Lock()
	a := s.cur
	s.recving.Store(true)
	s.mu.Unlock()
	err := a.cs.RecvMsg(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		// What ended while this call was in flight, and it did not see.
		s.recving.Store(false)
		s.settleLocked(s.cur)
	}()
	switch {
	case s.receivedLocked(a, err):
		return err // a message, or io.EOF
	case s.finished || a != s.cur:
		return toStatus(s.ctx, s.timedOut(a, err), s.answer) // the same status as before
	}
	if s.received || !s.closedSend || s.overflow || !s.idempotent || s.plan.retry == nil || s.committed.Load() {
		err = s.timedOut(a, err)
		s.finishLocked(err)
		return s.cfg.gaveUp(err, toStatus(s.ctx, err, s.answer))
	}
	// Before the first response, with everything sent: retry.
	return s.retryLocked(a, err, m)
}

// Header, Trailer and Context answer for the latest attempt's stream
// without waiting for a retry in progress.
func (s *stream) Header() (metadata.MD, error) {
	return (*s.curStream.Load()).Header()
}

func (s *stream) Trailer() metadata.MD {
	return (*s.curStream.Load()).Trailer()
}

// Context commits the stream: it is not retried afterwards, so the context
// returned stays the stream's (a retry would cancel it).
func (s *stream) Context() context.Context {
	s.committed.Store(true)
	return (*s.curStream.Load()).Context()
}
