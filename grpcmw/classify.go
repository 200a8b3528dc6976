package grpcmw

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Class is how a status code counts.
type Class int

const (
	// Success: the call worked.
	Success Class = iota
	// CallerError: the downstream is healthy but refused the call (bad
	// argument, not found, …): never trips a breaker, never retried.
	CallerError
	// Failure: the downstream failed; not worth retrying.
	Failure
	// RetryableFailure: the downstream failed; an idempotent call may be
	// retried.
	RetryableFailure
)

// DefaultClassify is the default classification of status codes.
func DefaultClassify(c codes.Code) Class {
	switch c {
	case codes.OK:
		return Success
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded:
		return RetryableFailure
	case codes.Internal, codes.Unknown, codes.DataLoss, codes.Aborted:
		return Failure
	default:
		return CallerError
	}
}

// pushbackKey is the trailer of gRFC A6 server pushback.
const pushbackKey = "grpc-retry-pushback-ms"

// outcome turns an attempt's error into what the chain's policies should
// see: caller errors marked as not failures and permanent, failures
// permanent unless retryable and allowed, pushback attached. callerCtx is
// the caller's context, not the attempt's.
func (cfg *config) outcome(callerCtx context.Context, cc *grpc.ClientConn, err error, trailer metadata.MD, mayRetry bool) error {
	if err == nil {
		return nil
	}
	if callerCtx.Err() != nil || deadlinePassed(callerCtx) {
		return err // the caller's own cancellation: the policies see it as such
	}
	if neutral(cc, err) {
		return breaker.Neutral(retry.Permanent(err))
	}
	code := status.Code(err)
	if timeout.Expired(err) {
		code = codes.DeadlineExceeded // a stream's first-response timeout cancels, so grpc says Canceled
	}
	switch cfg.classify(code) {
	case Success:
		return breaker.NotFailure(retry.Permanent(err))
	case CallerError:
		return breaker.NotFailure(retry.Permanent(err))
	case Failure:
		return retry.Permanent(err)
	}
	if !mayRetry {
		return retry.Permanent(err)
	}
	if v := trailer.Get(pushbackKey); len(v) > 0 {
		ms, perr := strconv.Atoi(v[0])
		if perr != nil || ms < 0 {
			return retry.After(err, -1) // gRFC A6: invalid or negative means do not retry
		}
		if ms > math.MaxInt64/int(time.Millisecond) {
			return retry.After(err, math.MaxInt64) // longer than any MaxPushback
		}
		return retry.After(err, time.Duration(ms)*time.Millisecond)
	}
	return err
}

// neutral reports an error that says nothing of the downstream's health:
// the caller closed the connection, or a message went over a size limit
// (grpc-go's ResourceExhausted "… larger than max …", on whichever side the
// limit is set: a property of the message, which a retry would not
// change). Overload, the other ResourceExhausted, stays a retryable
// failure.
func neutral(cc *grpc.ClientConn, err error) bool {
	if cc != nil && cc.GetState() == connectivity.Shutdown {
		return true
	}
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "larger than max")
}

func deadlinePassed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// statusError is a gRPC status error that keeps callguard's error behind it.
type statusError struct {
	st  *status.Status
	err error
}

func (e *statusError) Error() string              { return e.st.Err().Error() }
func (e *statusError) GRPCStatus() *status.Status { return e.st }
func (e *statusError) Unwrap() error              { return e.err }

// toStatus maps the chain's result to what a gRPC caller expects.
func toStatus(callerCtx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := callerCtx.Err(); cerr != nil {
		var se interface{ GRPCStatus() *status.Status }
		if !errors.As(err, &se) || se.GRPCStatus().Code() != status.FromContextError(cerr).Code() {
			// Ended by the caller, during a wait or a rejection: say so.
			return &statusError{status.FromContextError(cerr), err}
		}
	}
	if errors.Is(err, breaker.ErrOpen) {
		return &statusError{status.New(codes.Unavailable, err.Error()), err}
	}
	if timeout.Expired(err) {
		return &statusError{status.New(codes.DeadlineExceeded, err.Error()), err}
	}
	// The last attempt's own status error, without callguard's wrappers.
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		if e, ok := se.(error); ok {
			return e
		}
	}
	return err
}
