package grpcmw

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// plan is how a chain applies to a stream: its first retry wraps
// establishment, every breaker admits each attempt and learns the stream's
// final outcome, the soonest timeout inside the retry bounds the wait for
// the first response, and a timeout outside the retry bounds all attempts.
type plan struct {
	retry    *retry.Policy
	breakers []*breaker.Breaker
	first    time.Duration // establishment timeout, 0: none
	overall  time.Duration // bound on all attempts, 0: none
}

func planFor(c *chain.Chain) plan {
	var p plan
	for _, pol := range c.Policies() {
		switch v := pol.(type) {
		case *retry.Policy:
			if p.retry == nil {
				p.retry = v
			}
		case *breaker.Breaker:
			p.breakers = append(p.breakers, v)
		case *timeout.Policy:
			d := v.Timeout()
			if p.retry == nil && len(p.breakers) == 0 && p.overall == 0 {
				p.overall = d // outermost: bounds the attempts (and the first, below)
			}
			if p.first == 0 || d < p.first {
				p.first = d
			}
		}
	}
	return p
}

// StreamClientInterceptor runs stream establishment through c: see the
// package documentation for what applies to streams. Install it with
// grpc.WithChainStreamInterceptor, or use [DialOptions].
func StreamClientInterceptor(c *chain.Chain, opts ...Option) grpc.StreamClientInterceptor {
	cfg := newConfig(c, opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		ch, err := cfg.chainFor(ctx, method, cc)
		if err != nil {
			return nil, err
		}
		idempotent, maxAttempts := cfg.callSettings(method, callOpts)
		s := &stream{
			cfg: cfg, plan: planFor(ch), ctx: ctx, desc: desc, cc: cc, method: method,
			streamer: streamer, opts: callOpts, idempotent: idempotent, maxAttempts: maxAttempts,
		}
		if s.plan.overall > 0 {
			s.deadline = time.Now().Add(s.plan.overall)
		}
		if err := s.run(false, nil, nil); err != nil {
			return nil, toStatus(ctx, err)
		}
		s.stopAbandon = context.AfterFunc(ctx, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.finishLocked(ctx.Err())
		})
		return s, nil
	}
}

// stream is a client stream whose establishment callguard guards. Its
// methods follow grpc.ClientStream's concurrency rules: one goroutine may
// send while another receives.
type stream struct {
	cfg         *config
	plan        plan
	ctx         context.Context
	desc        *grpc.StreamDesc
	cc          *grpc.ClientConn
	method      string
	streamer    grpc.Streamer
	opts        []grpc.CallOption
	idempotent  bool
	maxAttempts int
	deadline    time.Time
	stopAbandon func() bool

	mu         sync.Mutex
	cur        grpc.ClientStream
	cancel     context.CancelCauseFunc
	timer      *time.Timer
	permits    []breaker.Permit
	attempts   int
	sent       []any
	sentBytes  int
	overflow   bool // sent more than the buffer holds: no more retries
	closedSend bool
	received   bool // the first response arrived: no more retries
	finished   bool
}

var errFirstResponse = errors.New("grpcmw: no first response in time")

// run establishes the stream through the retry, if any. With recv, each
// attempt also replays what was sent and receives the first message into m;
// failed is the error of the attempt that just failed, which counts as the
// retry's first attempt (retry.Policy.Continue).
func (s *stream) run(recv bool, m any, failed error) error {
	attempt := func(context.Context) error { return s.attempt(recv, m) }
	switch {
	case failed != nil:
		return s.plan.retry.Continue(s.ctx, s.deadline, s.outcome(failed, recv), attempt)
	case s.plan.retry == nil:
		return attempt(s.ctx)
	}
	return s.plan.retry.DoUntil(s.ctx, s.deadline, attempt)
}

// attempt makes one stream; the caller holds s.mu, or is the interceptor.
func (s *stream) attempt(recv bool, m any) error {
	s.attempts++
	permits := make([]breaker.Permit, 0, len(s.plan.breakers))
	for _, b := range s.plan.breakers {
		p, err := b.Allow(s.ctx)
		if err != nil {
			for _, q := range permits {
				q.Abandon() // admitted, but the call never happened
			}
			return err
		}
		permits = append(permits, p)
	}
	sctx, cancel := context.WithCancelCause(s.ctx)
	s.cancel, s.timer, s.permits = cancel, nil, permits
	cs, err := s.streamer(sctx, s.desc, s.cc, s.method, s.opts...)
	if err == nil {
		s.cur = cs // a failed attempt keeps the last stream, whose calls keep failing
		for _, msg := range s.sent {
			if err = cs.SendMsg(msg); err != nil {
				break
			}
		}
		if err == nil && s.closedSend {
			err = cs.CloseSend()
			s.armLocked()
		}
		if err == nil && recv {
			err = cs.RecvMsg(m)
			if err == nil {
				s.gotFirstLocked()
				if !s.desc.ServerStreams {
					s.finishLocked(nil)
				}
				return nil
			}
			if err == io.EOF {
				s.finishLocked(nil)
				return errEOF
			}
		}
	}
	if err != nil {
		err = s.timedOut(sctx, err)
		s.endAttemptLocked(err)
		return s.outcome(err, recv)
	}
	return nil
}

// errEOF ends a retry loop on a stream that ended cleanly before any message.
var errEOF = retry.Permanent(io.EOF)

// armLocked starts the wait for the first response, once the client has
// sent everything: a long upload or a bidi call still sending is not cut
// short by the chain's attempt timeout.
func (s *stream) armLocked() {
	if s.received || s.timer != nil || s.cancel == nil {
		return
	}
	if d := s.firstTimeout(); d > 0 {
		cancel := s.cancel
		s.timer = time.AfterFunc(d, func() { cancel(&timeout.Error{Timeout: d, Err: errFirstResponse}) })
	}
}

func (s *stream) firstTimeout() time.Duration {
	d := s.plan.first
	if !s.deadline.IsZero() {
		if left := time.Until(s.deadline); d == 0 || left < d {
			d = max(left, time.Nanosecond)
		}
	}
	return d
}

// timedOut reports the establishment timeout as such.
func (s *stream) timedOut(sctx context.Context, err error) error {
	var te *timeout.Error
	if s.ctx.Err() == nil && errors.As(context.Cause(sctx), &te) {
		return &timeout.Error{Timeout: te.Timeout, Err: err}
	}
	return err
}

func (s *stream) outcome(err error, recv bool) error {
	var trailer metadata.MD
	if s.cur != nil {
		trailer = s.cur.Trailer()
	}
	// Attempts count across establishment and the first receive, so a
	// stream never makes more than the retry's attempts (or the call's cap).
	limit := s.maxAttempts
	if s.plan.retry != nil && (limit == 0 || s.plan.retry.Attempts() < limit) {
		limit = s.plan.retry.Attempts()
	}
	may := s.idempotent && !s.overflow && !s.received && (!recv || s.closedSend) &&
		(limit == 0 || s.attempts < limit)
	return s.cfg.outcome(s.ctx, err, trailer, may)
}

// endAttemptLocked reports a failed attempt to the breakers.
func (s *stream) endAttemptLocked(err error) {
	for _, p := range s.permits {
		p.Done(s.cfg.outcome(s.ctx, err, nil, false))
	}
	s.permits = nil
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.cancel != nil {
		s.cancel(nil)
	}
}

func (s *stream) gotFirstLocked() {
	s.received = true
	s.sent = nil
	if s.timer != nil {
		s.timer.Stop()
	}
}

// finishLocked reports the stream's final outcome, once.
func (s *stream) finishLocked(err error) {
	if s.finished {
		return
	}
	s.finished = true
	if s.stopAbandon != nil {
		s.stopAbandon()
	}
	s.endAttemptLocked(err)
}

func (s *stream) SendMsg(m any) error {
	s.mu.Lock()
	if !s.received && !s.overflow {
		s.sent = append(s.sent, m)
		if pm, ok := m.(proto.Message); ok {
			s.sentBytes += proto.Size(pm)
		}
		if len(s.sent) > s.cfg.bufMsgs || s.sentBytes > s.cfg.bufBytes {
			s.overflow, s.sent = true, nil
		}
	}
	cur := s.cur
	s.mu.Unlock()
	// Not under the lock: a send blocked by flow control must not stop a
	// receiver on another goroutine. A stream is only replaced after
	// CloseSend, when no send can be in flight.
	return cur.SendMsg(m)
}

func (s *stream) CloseSend() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closedSend = true
	err := s.cur.CloseSend()
	s.armLocked()
	return err
}

func (s *stream) RecvMsg(m any) error {
	s.mu.Lock()
	cur, first := s.cur, !s.received
	s.mu.Unlock()
	err := cur.RecvMsg(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		if first {
			s.gotFirstLocked()
		}
		if !s.desc.ServerStreams {
			// Unary or client-streaming: this was the one response, and
			// grpc-go has already checked the end of the stream.
			s.finishLocked(nil)
		}
		return nil
	case err == io.EOF:
		s.finishLocked(nil)
		return io.EOF
	case s.finished || cur != s.cur:
		return err
	}
	err = s.timedOut(s.cur.Context(), err)
	if !first || !s.closedSend || s.overflow || !s.idempotent || s.plan.retry == nil {
		s.finishLocked(err)
		return toStatus(s.ctx, err)
	}
	// Before the first response, with everything sent: retry.
	s.endAttemptLocked(err)
	rerr := s.run(true, m, err)
	if rerr == nil {
		return nil
	}
	if errors.Is(rerr, io.EOF) {
		return io.EOF
	}
	s.finishLocked(rerr)
	return toStatus(s.ctx, rerr)
}

func (s *stream) Header() (metadata.MD, error) {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	return cur.Header()
}

func (s *stream) Trailer() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.Trailer()
}

func (s *stream) Context() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.Context()
}
