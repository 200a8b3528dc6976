package retry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/callguard/callguard/breaker"
)

// Reason says why a retry stopped.
type Reason int

const (
	// ReasonAttempts: all attempts failed.
	ReasonAttempts Reason = iota + 1
	// ReasonDeadline: the next wait would have outlived the caller's deadline.
	ReasonDeadline
	// ReasonBudget: the retry budget was spent, or a Throttle throttled the
	// retry.
	ReasonBudget
	// ReasonPushback: the server asked not to retry, or to wait longer than
	// MaxPushback.
	ReasonPushback
	// ReasonCanceled: the caller's context ended during a wait.
	ReasonCanceled
	// ReasonOpen: a breaker inside the retry is open for longer than the
	// next wait, so the next attempt would be rejected (without
	// RetryWhenOpen). The failure that ended the retries may be the one
	// that opened it.
	ReasonOpen
)

// String describes the reason.
func (r Reason) String() string {
	switch r {
	case ReasonAttempts:
		return "attempts used up"
	case ReasonDeadline:
		return "the next wait would outlive the deadline"
	case ReasonBudget:
		return "retry budget spent"
	case ReasonPushback:
		return "server pushback: do not retry, or not soon enough"
	case ReasonCanceled:
		return "caller canceled during a wait"
	case ReasonOpen:
		return "a breaker inside is open beyond the next wait"
	default:
		return fmt.Sprintf("Reason(%d)", int(r))
	}
}

// label is the reason's value in the callguard.reason attribute of the
// adapters' callguard.retry.exhausted metric: short, fixed, snake_case
// (String is the sentence, for error messages).
func (r Reason) label() string {
	switch r {
	case ReasonAttempts:
		return "attempts_exhausted"
	case ReasonDeadline:
		return "deadline"
	case ReasonBudget:
		return "budget_exhausted"
	case ReasonPushback:
		return "pushback"
	case ReasonCanceled:
		return "canceled"
	case ReasonOpen:
		return "breaker_open"
	default:
		return "unknown"
	}
}

// ExhaustedError is returned when retries end without a success. It unwraps
// to the last attempt's error, and for ReasonCanceled also to the caller's
// context error (context.Canceled or context.DeadlineExceeded) and its
// cause, if the context was canceled with one.
type ExhaustedError struct {
	Attempts int   // attempts made
	Last     error // the last attempt's error
	Reason   Reason
	ctxErr   error // ReasonCanceled: ctx.Err()
	cause    error // ReasonCanceled: context.Cause(ctx), if not ctxErr
}

// Error says how many attempts were made, why the retry stopped, and the
// last error.
func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("retry: gave up after %d attempts (%v): %v", e.Attempts, e.Reason, e.Last)
}

// Is reports, for [ReasonOpen], that an open breaker ended the retries:
// errors.Is(err, breaker.ErrOpen) holds for them as for a rejection.
func (e *ExhaustedError) Is(target error) bool {
	return e.Reason == ReasonOpen && target == breaker.ErrOpen
}

// Unwrap returns the last attempt's error and, after a cancellation, the
// context's error and cause.
func (e *ExhaustedError) Unwrap() []error {
	errs := []error{e.Last}
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}

// canceled is the ExhaustedError of a wait that ctx ended.
func canceled(ctx context.Context, attempts int, last error) *ExhaustedError {
	e := &ExhaustedError{Attempts: attempts, Last: last, Reason: ReasonCanceled, ctxErr: ctx.Err()}
	if cause := context.Cause(ctx); cause != e.ctxErr {
		e.cause = cause
	}
	return e
}

// Pushback is implemented by errors that carry a server's retry advice, such
// as HTTP Retry-After or gRPC grpc-retry-pushback-ms. RetryAfter returns the
// wait before the next attempt, overriding the backoff schedule, or a
// negative duration for "do not retry".
type Pushback interface {
	RetryAfter() time.Duration
}

func pushback(err error) (time.Duration, bool) {
	var pb Pushback
	if errors.As(err, &pb) {
		return pb.RetryAfter(), true
	}
	return 0, false
}

// WithPushback wraps err with a server's retry advice (see [Pushback]): the
// next attempt waits d instead of the backoff schedule, or none is made for
// a negative d. WithPushback(nil, d) is nil.
func WithPushback(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &pushbackError{err: err, after: d}
}

type pushbackError struct {
	err   error
	after time.Duration
}

func (e *pushbackError) Error() string {
	if e.after < 0 {
		return e.err.Error() + " (server: do not retry)"
	}
	return fmt.Sprintf("%v (server: retry after %v)", e.err, e.after)
}
func (e *pushbackError) Unwrap() error             { return e.err }
func (e *pushbackError) RetryAfter() time.Duration { return e.after }
