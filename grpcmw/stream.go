package grpcmw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/internal/adapter"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
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

// plan is how a chain applies to a stream: its retry wraps establishment,
// every breaker admits each attempt and learns the stream's final outcome,
// the soonest timeout bounds each attempt's creation, and a timeout
// outside the retry and the breakers bounds all attempts. Positions are in
// the chain's policies with nested chains flattened.
type plan struct {
	retry    *bridge.Retry
	breakers []*breaker.Breaker
	at       []int // each breaker's position in the chain
	timeouts []*timeout.Policy
	tAt      []int // each timeout's position
	outer    int   // the number of timeouts outside the retry and the breakers
	inner    int   // a position inside every policy: FirstMessageTimeout's
}

// times returns, now, the soonest timeout of the chain and its position,
// and the soonest of those outside the retry and the breakers, which bounds
// all attempts (0: none). A tie goes to the outer one, as in package chain;
// an adaptive timeout gives its current value.
func (p *plan) times() (first time.Duration, firstAt int, overall time.Duration, overallAt int) {
	for i, t := range p.timeouts {
		d := t.Timeout()
		if i < p.outer && (overall == 0 || d < overall) {
			overall, overallAt = d, p.tAt[i]
		}
		if first == 0 || d < first {
			first, firstAt = d, p.tAt[i]
		}
	}
	return first, firstAt, overall, overallAt
}

// planFor makes the plan of c, or says which of its policies a stream
// cannot apply.
func planFor(c *chain.Chain) (plan, error) {
	var p plan
	policies := adapter.Flatten(c)
	p.inner = len(policies)
	for i, pol := range policies {
		switch v := pol.(type) {
		case *retry.Policy:
			if p.retry != nil {
				return p, fmt.Errorf("grpcmw: streams cannot apply %v, policy #%d of chain %v: a stream applies one retry; keep a single retry, outside the breaker", v, i+1, c)
			}
			p.retry = bridge.RetryOf(v)
		case *breaker.Breaker:
			p.breakers = append(p.breakers, v)
			p.at = append(p.at, i)
		case *timeout.Policy:
			if p.retry == nil && len(p.breakers) == 0 {
				p.outer++ // outside: bounds all attempts
			}
			p.timeouts = append(p.timeouts, v)
			p.tAt = append(p.tAt, i)
		case *fallback.Policy:
			return p, fmt.Errorf("grpcmw: streams cannot apply %v, policy #%d of chain %v: a fallback cannot answer a stream; use grpcmw.UnaryOnly(), or give streams a chain without it", v, i+1, c)
		default:
			return p, fmt.Errorf("grpcmw: streams cannot apply %T, policy #%d of chain %v: a stream runs only breakers, a retry and timeouts; use grpcmw.UnaryOnly(), or give streams a chain of those", v, i+1, c)
		}
	}
	return p, nil
}

func (cfg *config) stream() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		p, err := cfg.chainFor(ctx, method, cc)
		if err != nil {
			return nil, err
		}
		if p.streamErr != nil {
			return nil, p.streamErr
		}
		idempotent, maxAttempts := cfg.callSettings(method, callOpts)
		s := &stream{
			mu:  make(chanMutex, 1),
			cfg: cfg, plan: &p.plan, ctx: ctx, desc: desc, cc: cc, method: method,
			streamer: streamer, opts: callOpts, idempotent: idempotent, maxAttempts: maxAttempts,
		}
		var overall time.Duration
		s.first, s.firstAt, overall, s.overallAt = s.plan.times()
		if overall > 0 {
			s.deadline = time.Now().Add(overall)
		}
		// Under the lock: an attempt's watchers (see attempt) may run as soon
		// as its stream exists.
		s.mu.Lock()
		err = s.establishLocked()
		s.mu.Unlock()
		if err != nil {
			return nil, toStatus(ctx, err, s.answer)
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

	mu         chanMutex
	cur        *attempt // the latest attempt that made a stream; a failed retry keeps it, and its calls keep failing
	attempts   int
	sent       []any
	sentBytes  int
	overflow   bool // sent more than the buffer holds, or the caller saw io.EOF: no more retries
	closedSend bool
	received   bool  // the first response arrived: no more retries
	finished   bool  // the final outcome is known: no more retries
	lastErr    error // the last failed attempt's error, as the retry saw it
	answer     error // the last failed attempt's own error: the downstream's last answer
}

// attempt is one try at the stream, with the breakers' permits for it.
type attempt struct {
	cs      grpc.ClientStream // nil until the streamer returns one
	ctx     context.Context
	cancel  context.CancelCauseFunc
	timer   *time.Timer // the chain's timeout, while it applies
	stop    func() bool // stops the watch of ctx
	permits []breaker.Permit
	done    bool                  // the permits are reported; under stream.mu
	fin     atomic.Pointer[error] // grpc-go has finished the stream with this status (grpc.OnFinish)
}

// expiry is the cause with which a chain timeout ends an attempt: owner is
// the position in the chain of the timeout that set the deadline.
type expiry struct{ owner int }

func (*expiry) Error() string { return "grpcmw: stream not established in time" }

// errEOF ends a retry loop on a stream that ended cleanly before any message.
var errEOF = retry.Permanent(io.EOF)

// establishLocked makes the stream through the retry, if any.
func (s *stream) establishLocked() error {
	attempt := func(context.Context) error { return s.attemptLocked(false, nil) }
	if s.plan.retry == nil {
		return attempt(s.ctx)
	}
	return s.plan.retry.DoUntil(s.ctx, s.deadline, attempt)
}

// attemptLocked makes one stream. With recv, a retry, it also replays what
// was sent and receives the first message into m.
func (s *stream) attemptLocked(recv bool, m any) error {
	s.attempts++
	permits := make([]breaker.Permit, 0, len(s.plan.breakers))
	for _, b := range s.plan.breakers {
		p, err := b.Allow(s.ctx)
		if err != nil {
			for _, q := range permits {
				q.DoneNeutral() // admitted, but the call never happened
			}
			return err
		}
		permits = append(permits, p)
	}
	a := &attempt{permits: permits}
	a.ctx, a.cancel = context.WithCancelCause(s.ctx)
	// The chain's timeout bounds the streamer, which can block (waiting for
	// a connection, grpc.WaitForReady), as it bounds a unary call.
	s.armLocked(a)
	// grpc-go calls OnFinish when it ends the stream for any reason:
	// RecvMsg's status, a SendMsg error, Header, the caller's context,
	// ClientConn.Close. Unlike watching ClientStream.Context, it does not
	// commit grpc-go's attempt, which would end its transparent retry.
	opts := append(s.opts[:len(s.opts):len(s.opts)], grpc.OnFinish(func(err error) {
		a.fin.Store(&err)
		if !s.recving.Load() && s.sending.Load() == 0 { // else the call in flight settles it
			go s.settle(a) // not inline: grpc-go may call this under s.mu, from this very attempt
		}
	}))
	cs, err := s.streamer(a.ctx, s.desc, s.cc, s.method, opts...)
	if err != nil {
		return s.failLocked(a, err, nil, recv)
	}
	a.cs, s.cur = cs, a
	s.curStream.Store(&cs)
	if recv && s.committed.Load() {
		// Context was called as this retry began, and may have handed out
		// the failed attempt's context: the stream ends there instead.
		s.abandonLocked(a)
		s.finished = true
		return retry.Permanent(s.lastErr) // the failure that led to this retry
	}
	a.stop = context.AfterFunc(a.ctx, func() { s.settle(a) }) // also for streams that are not grpc-go's
	if a.timer != nil {
		// Created: the chain's timeouts bounded the creation only.
		a.timer.Stop()
		a.timer = nil
	}
	if s.closedSend {
		s.armFirstLocked(a)
	}
	eof := false
	for _, msg := range s.sent {
		if err = cs.SendMsg(msg); err != nil {
			break
		}
	}
	if err == io.EOF {
		// The stream ended on the server's side: RecvMsg gets its status,
		// which is classified (and maybe retried) as usual.
		err, eof = nil, true
	}
	if err != nil {
		// A client-side error (see SendMsg), and grpc-go has ended the
		// stream: neither the downstream's failure nor worth another try.
		s.abandonLocked(a)
		return retry.Permanent(err)
	}
	if s.closedSend && !eof {
		_ = cs.CloseSend() // grpc-go's returns nil: the status comes from RecvMsg
	}
	if !recv {
		return nil
	}
	err = cs.RecvMsg(m)
	switch {
	case err == nil:
		s.gotFirstLocked(a)
		if !s.desc.ServerStreams {
			s.finishLocked(nil)
		}
		return nil
	case err == io.EOF:
		s.finishLocked(nil)
		return errEOF
	}
	return s.failLocked(a, err, cs.Trailer(), recv)
}

// failLocked ends attempt a, failed with err, and returns what the retry
// should see. trailer is a's, if it made a stream that ended.
func (s *stream) failLocked(a *attempt, err error, trailer metadata.MD, recv bool) error {
	s.answer = err
	err = s.timedOut(a, err)
	s.lastErr = err
	s.endLocked(a, err)
	out := s.outcome(err, trailer, recv)
	var until time.Time
	for _, b := range s.plan.breakers {
		if u := bridge.BreakerOpenUntil(b); u.After(until) {
			until = u
		}
	}
	if !until.IsZero() {
		// A breaker is open: the retry learns when it admits again, and does
		// not wait for a rejection.
		out = &bridge.OpenAfter{Err: out, Until: until}
	}
	return out
}

// armLocked starts the chain's timeout for the creation of attempt a.
func (s *stream) armLocked(a *attempt) {
	if s.received || a.timer != nil || a.done {
		return
	}
	if d, owner := s.firstTimeout(); d > 0 {
		cancel, cause := a.cancel, &timeout.Error{Timeout: d, Err: &expiry{owner: owner}}
		a.timer = time.AfterFunc(d, func() { cancel(cause) })
	}
}

// armFirstLocked starts FirstMessageTimeout for attempt a, once the client
// has sent everything: it ends the attempt as a failure, inside every
// breaker.
func (s *stream) armFirstLocked(a *attempt) {
	d := s.cfg.firstMsg
	if d == 0 || s.received || a.timer != nil || a.done {
		return
	}
	cancel, cause := a.cancel, &timeout.Error{Timeout: d, Err: &expiry{owner: s.plan.inner}}
	a.timer = time.AfterFunc(d, func() { cancel(cause) })
}

// firstTimeout is the soonest of the chain's timeout and what is left of
// the overall one, with the position of the timeout it comes from.
func (s *stream) firstTimeout() (time.Duration, int) {
	d, owner := s.first, s.firstAt
	if !s.deadline.IsZero() {
		if left := time.Until(s.deadline); d == 0 || left <= d {
			d, owner = max(left, time.Nanosecond), s.overallAt
		}
	}
	return d, owner
}

// timedOut reports an attempt that the chain's timeout ended as such.
func (s *stream) timedOut(a *attempt, err error) error {
	var te *timeout.Error
	if s.ctx.Err() == nil && errors.As(context.Cause(a.ctx), &te) {
		return &timeout.Error{Timeout: te.Timeout, Err: err}
	}
	return err
}

// limit is the most attempts the stream may make, 0: no limit.
func (s *stream) limit() int {
	// Attempts count across establishment and the first receive, so a
	// stream never makes more than the retry's attempts (or the call's cap).
	limit := s.maxAttempts
	if s.plan.retry != nil && (limit == 0 || s.plan.retry.Attempts < limit) {
		limit = s.plan.retry.Attempts
	}
	return limit
}

// outcome is what the retry sees of a failed attempt. trailer is that
// attempt's own (nil if it made no stream), for its pushback.
func (s *stream) outcome(err error, trailer metadata.MD, recv bool) error {
	limit := s.limit()
	may := s.idempotent && !s.overflow && !s.received && !s.committed.Load() && (!recv || s.closedSend) &&
		(limit == 0 || s.attempts < limit)
	return s.cfg.outcome(s.ctx, s.cc, nil, nil, err, trailer, may)
}

// endLocked reports attempt a's outcome to the breakers, once, and releases
// it.
func (s *stream) endLocked(a *attempt, err error) {
	if a.done {
		return
	}
	owner := -1
	var exp *expiry
	if err != nil && s.ctx.Err() == nil && errors.As(context.Cause(a.ctx), &exp) {
		owner = exp.owner
	}
	for i, p := range a.permits {
		if owner >= 0 && owner < s.plan.at[i] {
			// As in package chain: a deadline from a timeout outside the
			// breaker is the caller's, as far as the breaker is concerned.
			p.DoneNeutral()
			continue
		}
		p.Done(s.cfg.outcome(s.ctx, s.cc, nil, nil, err, nil, false))
	}
	s.releaseLocked(a)
}

// abandonLocked reports attempt a as neutral, once, and releases it.
func (s *stream) abandonLocked(a *attempt) {
	if a.done {
		return
	}
	for _, p := range a.permits {
		p.DoneNeutral()
	}
	s.releaseLocked(a)
}

func (s *stream) releaseLocked(a *attempt) {
	a.done, a.permits = true, nil
	if a.timer != nil {
		a.timer.Stop()
	}
	if a.stop != nil {
		a.stop()
	}
	a.cancel(nil)
}

// settle reports an attempt whose stream ended, if nothing else will.
func (s *stream) settle(a *attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked(a)
}

// settleLocked reports attempt a if its stream ended (grpc-go finished it,
// or its context ended) and no call is in flight to see how: a caller may
// close the ClientConn, cancel, or learn from Header that the stream
// ended, and never call RecvMsg again.
func (s *stream) settleLocked(a *attempt) {
	fin := a.fin.Load()
	if a.done || s.recving.Load() || s.sending.Load() > 0 || (fin == nil && a.ctx.Err() == nil) {
		return
	}
	var exp *expiry
	switch {
	case s.ctx.Err() != nil:
		s.finished = true
		s.abandonLocked(a) // the caller's own cancellation: neutral
	case errors.As(context.Cause(a.ctx), &exp):
		// The chain's timeout: a failure, as RecvMsg would report it (or
		// neutral, for a timeout outside the breaker). A later RecvMsg may
		// still retry.
		s.endLocked(a, context.Cause(a.ctx))
	case s.cc != nil && s.cc.GetState() == connectivity.Shutdown:
		s.abandonLocked(a) // ClientConn.Close: the caller's doing, neutral
	default:
		// The stream's status, as Header found it: counted as RecvMsg will
		// count it. A later RecvMsg gets it, and may still retry.
		s.endLocked(a, *fin)
	}
}

func (s *stream) gotFirstLocked(a *attempt) {
	s.received = true
	s.sent = nil
	if a.timer != nil {
		a.timer.Stop()
	}
}

// finishLocked reports the stream's final outcome, once.
func (s *stream) finishLocked(err error) {
	if s.finished {
		return
	}
	s.finished = true
	if s.cur != nil {
		s.endLocked(s.cur, err)
	}
}

// bufferLocked keeps m for a replay, while a retry may still need it.
func (s *stream) bufferLocked(m any) {
	if s.received || s.overflow || s.closedSend || s.finished {
		return
	}
	pm, ok := m.(proto.Message)
	if ok {
		s.sentBytes += proto.Size(pm)
		s.sent = append(s.sent, m)
	}
	// A message of unknown size could make the replay too large to send
	// without reading (see maxReplayBytes): it ends the retries too.
	if !ok || len(s.sent) > s.cfg.bufMsgs || s.sentBytes > s.cfg.bufBytes {
		s.overflow, s.sent = true, nil
	}
}

func (s *stream) SendMsg(m any) error {
	s.mu.Lock()
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
	err := s.cur.cs.CloseSend()
	s.armFirstLocked(s.cur)
	return err
}

func (s *stream) RecvMsg(m any) error {
	s.mu.Lock()
	a, first := s.cur, !s.received
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
	case err == nil:
		if first {
			s.gotFirstLocked(a)
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
	case s.finished || a != s.cur:
		return toStatus(s.ctx, s.timedOut(a, err), s.answer) // the same status as before
	}
	if !first || !s.closedSend || s.overflow || !s.idempotent || s.plan.retry == nil || s.committed.Load() {
		err = s.timedOut(a, err)
		s.finishLocked(err)
		return toStatus(s.ctx, err, s.answer)
	}
	// Before the first response, with everything sent: retry.
	failed := s.failLocked(a, err, a.cs.Trailer(), true)
	rerr := s.plan.retry.Continue(s.ctx, s.deadline, failed, func(context.Context) error {
		if s.committed.Load() {
			return retry.Permanent(s.lastErr) // Context was called during the wait
		}
		return s.attemptLocked(true, m)
	})
	if rerr == nil {
		return nil
	}
	if errors.Is(rerr, io.EOF) {
		return io.EOF
	}
	s.finishLocked(rerr)
	return toStatus(s.ctx, rerr, s.answer)
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

// chanMutex is a mutex made of a channel: a goroutine waiting for it is
// durably blocked in the sense of testing/synctest, so a stream used in a
// synctest bubble lets virtual time pass while one goroutine waits for the
// lock and the holder waits out a retry's backoff (a sync.Mutex would stop
// the bubble's clock).
type chanMutex chan struct{}

func (m chanMutex) Lock()   { m <- struct{}{} }
func (m chanMutex) Unlock() { <-m }
