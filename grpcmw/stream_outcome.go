package grpcmw

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// expiry is the cause with which a chain timeout ends an attempt: owner is
// the position in the chain of the timeout that set the deadline.
type expiry struct{ owner int }

func (*expiry) Error() string { return "grpcmw: stream not established in time" }

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

// answerOf is what the caller is told of a failed attempt when a breaker
// ends the retries after it: the attempt's own status, or DeadlineExceeded
// for one the chain's timeout ended (which cancels the attempt's context,
// so grpc-go reports Canceled), as when the retries run out.
func answerOf(err error) error {
	if errors.As(err, new(creationCut)) {
		return &statusError{unavailableCreation(err), err}
	}
	var te *timeout.Error
	if errors.As(err, &te) {
		return &statusError{status.New(codes.DeadlineExceeded, (&timeout.Error{Timeout: te.Timeout}).Error()), err}
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
// attempt's own (nil if it made no stream), for its pushback; headed, its
// response began with a header that commits the stream (headerCommit).
func (s *stream) outcome(err error, trailer metadata.MD, recv, headed bool) error {
	limit := s.limit()
	may := s.idempotent && !headed && !s.overflow && !s.received && !s.committed.Load() && (!recv || s.closedSend) &&
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
	for i, p := range a.gated {
		if owner >= 0 && owner < s.plan.gAt[i] {
			p.DoneNeutral()
			continue
		}
		p.Done(s.cfg.outcome(s.ctx, s.cc, nil, nil, err, nil, false))
	}
	if !errors.Is(err, io.EOF) {
		a.failed = err
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
	for _, p := range a.gated {
		p.DoneNeutral()
	}
	s.releaseLocked(a)
}

func (s *stream) releaseLocked(a *attempt) {
	a.done, a.permits, a.gated = true, nil, nil
	if a.end != nil {
		a.end(a.failed)
		a.end = nil
	}
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
// or its context ended) and no call is in flight to see how (a SendMsg, a
// RecvMsg, the establishment or a retry, which settle it): a caller may
// close the ClientConn, cancel, or learn from Header that the stream
// ended, and never call RecvMsg again.
func (s *stream) settleLocked(a *attempt) {
	fin := a.fin.Load()
	if a.done || s.retrying || s.recving.Load() || s.sending.Load() > 0 || (fin == nil && a.ctx.Err() == nil) {
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

// receivedLocked takes what a RecvMsg on attempt a returned, if it is a
// message or the stream's clean end (io.EOF), and reports whether it was.
// The first message ends the retries, the replay buffer and
// FirstMessageTimeout. A stream that is not server-streaming has then had
// its one response, and grpc-go has already checked its end: that, like
// io.EOF, is the stream's final outcome, a success.
func (s *stream) receivedLocked(a *attempt, err error) bool {
	if err != nil && err != io.EOF {
		return false
	}
	if err == nil && !s.received {
		s.received = true
		s.sent = nil
		if a.timer != nil {
			a.timer.Stop()
		}
	}
	if err == io.EOF || !s.desc.ServerStreams {
		s.finishLocked(nil)
	}
	return true
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
	if s.stop != nil && err == nil {
		// A clean end: nothing reads the stream's context again. After a
		// failure, a later RecvMsg gives the same status, from ctx: its
		// deadline's timer ends it.
		s.stop()
	}
	if err == nil && s.cfg.succeeded != nil {
		s.cfg.succeeded()
	}
}

// creationCut is the error of a stream attempt whose creation the chain's
// timeout ended while the caller's context lived: grpc-go had made no
// stream yet, so the attempt was waiting for a connection (a caller's
// grpc.WaitForReady, a probe's). The caller is told Unavailable, not
// DeadlineExceeded: its own deadline has not passed, and the downstream
// was not reachable within the chain's time — a status a client library
// with its own retry (etcd's clientv3, for its Watch streams) takes as
// transient, where DeadlineExceeded ends the stream for good. The chain's
// retry and breakers see the timeout as before (it unwraps to it).
type creationCut struct{ error }

func (e creationCut) Unwrap() error { return e.error }

// unavailableCreation is the status of a creationCut.
func unavailableCreation(err error) *status.Status {
	return status.New(codes.Unavailable, "grpcmw: the chain's timeout ended the stream's creation while it waited for a connection: "+err.Error())
}
