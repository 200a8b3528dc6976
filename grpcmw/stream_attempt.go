package grpcmw

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
)

// attempt is one try at the stream, with the breakers' permits for it.
// Its fields change under stream.mu, but for fin.
type attempt struct {
	cs      grpc.ClientStream // nil until the streamer returns one
	ctx     context.Context
	cancel  context.CancelCauseFunc
	timer   *time.Timer // the chain's timeout, while it applies
	stop    func() bool // stops the watch of ctx
	permits []breaker.Permit
	gated   []permit              // the gates' permits, taken before the breakers'
	done    bool                  // the permits are reported
	fin     atomic.Pointer[error] // grpc-go has finished the stream with this status (grpc.OnFinish)
	end     func(error)           // ends the attempt's span (Tracing), nil without
	failed  error                 // the attempt's failure, for its span
}

// errEOF ends a retry loop on a stream that ended cleanly before any message.
var errEOF = retry.Permanent(io.EOF)

// establish makes the stream through the retry, if any.
//
// The stream's lock, mu, is held only to read and change the stream's
// state, never while something waits. The establishment, and a retry in
// RecvMsg (see retryLocked), mark the stream retrying under the lock, then
// drop it: the retry's waits (its backoff, a breaker's open stay), each
// attempt's admission (a limiter's or a bulkhead's queue), creation, replay
// and first receive run without it, and the attempt takes it back to
// install its stream and to record how it went.
// While the stream is retrying, Header, Trailer and Context answer for the
// latest attempt's stream, CloseSend has nothing left to do, settle leaves
// the attempts to the retry, and only SendMsg (after CloseSend, a caller's
// mistake) waits, on idle, for the retry to end. So no method waits behind
// a backoff or a queue, and in a testing/synctest bubble no goroutine is
// stuck on the lock (which would stop the bubble's clock) while the retry
// sleeps or its attempt is queued.
func (s *stream) establish() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unlockedRetry(func() error {
		if s.plan.retry == nil {
			return s.attempt(false, nil)
		}
		return s.plan.retry.DoUntil(s.ctx, s.deadline, 0, func(context.Context) error { return s.attempt(false, nil) })
	})
}

// retryLocked retries the stream after its attempt a failed with err
// before any response, and receives the first response into m. Called
// with s.mu held, it marks the stream retrying and releases the lock for
// the retry, taking it back before it returns.
func (s *stream) retryLocked(a *attempt, err error, m any) error {
	failed := s.failLocked(a, err, a.cs.Trailer(), true)
	err = s.unlockedRetry(func() error {
		return s.plan.retry.Continue(s.ctx, s.deadline, 0, failed, func(context.Context) error { return s.attempt(true, m) })
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF):
		return io.EOF
	}
	s.finishLocked(err)
	return s.cfg.gaveUp(err, toStatus(s.ctx, err, s.answer))
}

// unlockedRetry runs retry, which must not hold s.mu (it waits), with the
// stream marked retrying; called with s.mu held, it returns with s.mu held
// and the retry ended, also if retry panics (a user's OnRetry, RetryIf or
// Classify, or another interceptor's streamer): the panic goes on with the
// lock held, as the caller's deferred unlock expects.
func (s *stream) unlockedRetry(retry func() error) error {
	s.retrying = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.retriedLocked()
	}()
	return retry()
}

// retriedLocked ends an establishment or a retry: a SendMsg waiting for it
// goes on, and what ended meanwhile is settled (if no call is in flight to
// see it: see settleLocked).
func (s *stream) retriedLocked() {
	s.retrying = false
	s.idle.Broadcast()
	if s.cur != nil {
		s.settleLocked(s.cur)
	}
}

// attempt makes one stream. It takes s.mu in turns, never across the
// admission, the streamer, the replay or the first receive, which can
// block. With recv, a retry in RecvMsg, it also replays what was sent and
// receives the first message into m.
func (s *stream) attempt(recv bool, m any) error {
	s.mu.Lock()
	err := s.countLocked(recv)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	gated, permits, err := s.admit()
	if err != nil {
		return err
	}
	s.mu.Lock()
	a, err := s.beginLocked(recv, gated, permits)
	s.mu.Unlock()
	if err != nil {
		return err
	}
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
	if _, bounded := a.ctx.Deadline(); bounded && s.cfg.readyProbes && halfOpen(s.plan.breakers) {
		// A probe: it waits for a ready connection, as a unary probe does
		// (see ProbesWaitForReady).
		opts = append(opts, grpc.WaitForReady(true))
		if s.cc != nil && s.cc.GetState() == connectivity.TransientFailure {
			s.cc.ResetConnectBackoff()
		}
	}
	cs, err := s.streamer(a.ctx, s.desc, s.cc, s.method, opts...)
	s.mu.Lock()
	if err != nil {
		err = s.failLocked(a, err, nil, recv)
	} else {
		err = s.installLocked(a, cs, recv)
	}
	// The replay needs no lock: no SendMsg runs while the stream retries,
	// and there is nothing to replay when it is first established.
	sent, closedSend := s.sent, s.closedSend
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err = s.replay(a, cs, sent, closedSend); err != nil || !recv {
		return err
	}
	err = cs.RecvMsg(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.receivedLocked(a, err) {
		if err == io.EOF {
			return errEOF
		}
		return nil
	}
	return s.failLocked(a, err, cs.Trailer(), recv)
}

// countLocked counts a new attempt, unless Context was called during the
// retry's wait.
func (s *stream) countLocked(recv bool) error {
	if recv && s.committed.Load() {
		return retry.Permanent(s.lastErr)
	}
	s.attempts++
	return nil
}

// admit takes the gates' permits for an attempt, then the breakers'. It
// runs without s.mu, as the retry's waits do (see establish): a limiter's
// or a bulkhead's queue may wait, within its MaxWait, and a breaker's
// Allow may call its OnStateChange.
func (s *stream) admit() ([]permit, []breaker.Permit, error) {
	var gated []permit
	for _, g := range s.plan.gates {
		p, err := g(s.ctx)
		if err != nil {
			neutral(gated, nil)
			return nil, nil, err
		}
		gated = append(gated, p)
	}
	permits := make([]breaker.Permit, 0, len(s.plan.breakers))
	for _, b := range s.plan.breakers {
		p, err := b.Allow(s.ctx)
		if err != nil {
			neutral(gated, permits) // admitted, but the call never happened
			return nil, nil, err
		}
		permits = append(permits, p)
	}
	return gated, permits, nil
}

// neutral gives back permits for an attempt that was never made.
func neutral(gated []permit, permits []breaker.Permit) {
	for _, p := range permits {
		p.DoneNeutral()
	}
	for _, p := range gated {
		p.DoneNeutral()
	}
}

// beginLocked starts an attempt admitted with the gates' and the
// breakers' permits, and starts the chain's timeout for its creation.
func (s *stream) beginLocked(recv bool, gated []permit, permits []breaker.Permit) (*attempt, error) {
	if recv && s.committed.Load() {
		// Context was called while the attempt waited for its admission.
		neutral(gated, permits)
		return nil, retry.Permanent(s.lastErr)
	}
	a := &attempt{permits: permits, gated: gated}
	a.ctx, a.cancel = context.WithCancelCause(s.ctx)
	if tr := s.cfg.tracing; tr != nil {
		// The attempt's span lives until its outcome is reported (see
		// releaseLocked); beneath it, otelgrpc's client span of the stream.
		a.ctx, a.end = tr.Attempt(a.ctx, s.method, 0, s.attempts, true)
	}
	// The chain's timeout bounds the streamer, which can block (waiting for
	// a connection, grpc.WaitForReady), as it bounds a unary call.
	s.armLocked(a)
	return a, nil
}

// installLocked makes attempt a, whose stream cs was created, the
// stream's current attempt.
func (s *stream) installLocked(a *attempt, cs grpc.ClientStream, recv bool) error {
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
	return nil
}

// replay sends attempt a's new stream cs what was sent on the stream
// before, and closes its send side if the caller has closed it.
func (s *stream) replay(a *attempt, cs grpc.ClientStream, sent []any, closedSend bool) error {
	var err error
	for _, msg := range sent {
		if err = cs.SendMsg(msg); err != nil {
			break
		}
	}
	switch {
	case err == io.EOF:
		// The stream ended on the server's side: RecvMsg gets its status,
		// which is classified (and maybe retried) as usual.
		return nil
	case err != nil:
		// A client-side error (see SendMsg), and grpc-go has ended the
		// stream: neither the downstream's failure nor worth another try.
		s.mu.Lock()
		s.abandonLocked(a)
		s.mu.Unlock()
		return retry.Permanent(err)
	}
	if closedSend {
		_ = cs.CloseSend() // grpc-go's returns nil: the status comes from RecvMsg
	}
	return nil
}

// failLocked ends attempt a, failed with err, and returns what the retry
// should see. trailer is a's, if it made a stream that ended.
func (s *stream) failLocked(a *attempt, err error, trailer metadata.MD, recv bool) error {
	err = s.timedOut(a, err)
	if a.cs == nil && timeout.Expired(err) && s.ctx.Err() == nil {
		// The chain's timeout ended the creation: no stream had been
		// made, the attempt was still waiting for a connection.
		err = creationCut{err}
	}
	s.answer = answerOf(err)
	s.lastErr = err
	s.endLocked(a, err)
	// With headerCommit, a stream whose response began with a header is
	// committed, as grpc-go commits it once its header arrives; its stream
	// has ended here, so Header does not wait.
	headed := s.cfg.headerCommit && a.cs != nil && headerCame(a.cs)
	out := s.outcome(err, trailer, recv, headed)
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

// headerCame reports an ended stream whose response began with a header
// (grpc-go's Header returns none for a trailers-only response).
func headerCame(cs grpc.ClientStream) bool {
	md, err := cs.Header()
	return err == nil && md != nil
}
