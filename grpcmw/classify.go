package grpcmw

import (
	"context"
	"errors"
	"math"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/adapter"
	"github.com/callguard/callguard/internal/deadline"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Class is how a status code counts.
type Class int

const (
	// ClassSuccess: the call worked.
	ClassSuccess Class = iota
	// ClassCallerError: the downstream is healthy but refused the call (bad
	// argument, not found, …): never trips a breaker, never retried.
	ClassCallerError
	// ClassFailure: the downstream failed; not worth retrying.
	ClassFailure
	// ClassRetryableFailure: the downstream failed; an idempotent call may be
	// retried.
	ClassRetryableFailure
)

// DefaultClassify is the default classification of status codes:
// Unavailable, ResourceExhausted and DeadlineExceeded are retryable
// failures (a ResourceExhausted is retried only after the server's
// pushback: overload, a quota or a size limit would refuse the call again),
// Internal, Unknown, DataLoss and Aborted failures, OK a success, and every
// other code a caller error.
func DefaultClassify(c codes.Code) Class {
	switch c {
	case codes.OK:
		return ClassSuccess
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded:
		return ClassRetryableFailure
	case codes.Internal, codes.Unknown, codes.DataLoss, codes.Aborted:
		return ClassFailure
	default:
		return ClassCallerError
	}
}

// pushbackKey is the trailer of gRFC A6 server pushback.
const pushbackKey = "grpc-retry-pushback-ms"

// outcome turns an attempt's error into what the chain's policies should
// see: caller errors marked as not failures and permanent, conditions of
// the client's own making neutral and permanent, failures permanent unless
// retryable and allowed, pushback attached. callerCtx is the caller's
// context, not the attempt's; req and opts are the call's (nil for a
// stream). No decision depends on an error's text.
func (cfg *config) outcome(callerCtx context.Context, cc *grpc.ClientConn, req any, opts []grpc.CallOption, err error, trailer metadata.MD, mayRetry bool) error {
	if err == nil {
		return nil
	}
	if deadline.Ended(callerCtx) {
		return err // the caller's own cancellation: the policies see it as such
	}
	if clientSide(cc, req, opts, err) {
		return breaker.Neutral(retry.Permanent(err))
	}
	code := status.Code(err)
	if timeout.Expired(err) {
		code = codes.DeadlineExceeded // a stream's first-message timeout cancels, so grpc says Canceled
	}
	switch cfg.classify(code) {
	case ClassSuccess, ClassCallerError:
		return breaker.NotFailure(retry.Permanent(err))
	case ClassFailure:
		return retry.Permanent(err)
	}
	if !mayRetry {
		return retry.Permanent(err)
	}
	if v := trailer.Get(pushbackKey); len(v) == 1 {
		// gRFC A6: negative or malformed means do not retry; a number too
		// large for a Duration waits longer than any MaxPushback.
		return retry.WithPushback(err, adapter.PushbackMs(v[0]))
	} else if len(v) > 1 {
		// Several values: grpc-go does not retry.
		return retry.WithPushback(err, -1)
	}
	if code == codes.ResourceExhausted {
		// Overload, a quota or a size limit: retried only when the server
		// says when (pushback, above). Retrying at once would add load,
		// and a limit would refuse the same call again.
		return retry.Permanent(err)
	}
	return err
}

// clientSide reports an error of the client's own making, which says
// nothing of the downstream's health, by what is structurally known: the
// caller closed the connection; a request over the call's send limit
// (grpc.MaxCallSendMsgSize, or the default from grpc.WithDefaultCallOptions),
// which grpc-go refuses before sending with ResourceExhausted; a request
// that does not marshal, which grpc-go reports as Internal.
func clientSide(cc *grpc.ClientConn, req any, opts []grpc.CallOption, err error) bool {
	if cc != nil && cc.GetState() == connectivity.Shutdown {
		return true
	}
	m, ok := req.(proto.Message)
	if !ok {
		return false
	}
	switch status.Code(err) {
	case codes.ResourceExhausted:
		return proto.Size(m) > maxSend(opts)
	case codes.Internal:
		_, merr := proto.Marshal(m)
		return merr != nil
	}
	return false
}

// maxSend is the send limit the call options set (the last one wins, as in
// grpc-go), or grpc-go's default.
func maxSend(opts []grpc.CallOption) int {
	limit := math.MaxInt32
	for _, o := range opts {
		if o, ok := o.(grpc.MaxSendMsgSizeCallOption); ok {
			limit = o.MaxSendMsgSize
		}
	}
	return limit
}

// statusError is a gRPC status error that keeps callguard's error behind it.
type statusError struct {
	st  *status.Status
	err error
}

func (e *statusError) Error() string              { return e.st.Err().Error() }
func (e *statusError) GRPCStatus() *status.Status { return e.st }
func (e *statusError) Unwrap() error              { return e.err }

// toStatus is the package's toStatus, with the code a rejection before
// any attempt carries replaced by RejectionCode's.
func (cfg *config) toStatus(callerCtx context.Context, err, answer error) error {
	out := cfg.gaveUp(err, toStatus(callerCtx, err, answer))
	if cfg.rejectionCode == nil || out == nil || callerCtx.Err() != nil {
		return out
	}
	if errors.Is(err, callguard.ErrRejected) || (errors.Is(err, breaker.ErrOpen) && answer == nil) {
		return &statusError{status.New(*cfg.rejectionCode, err.Error()), err}
	}
	return out
}

// gaveUp returns out, the status of err, or, for the interceptors of a
// service config, DeadlineExceeded when err is a retry that gave up
// because its wait would outlive the deadline: grpc-go waits, and its
// caller gets DeadlineExceeded at the deadline; this caller gets it at
// once.
func (cfg *config) gaveUp(err, out error) error {
	var ex *retry.ExhaustedError
	if !cfg.deadlineCode || out == nil || !errors.As(err, &ex) || ex.Reason != retry.ReasonDeadline {
		return out
	}
	return &statusError{status.New(codes.DeadlineExceeded, err.Error()), err}
}

// toStatus maps the chain's result to what a gRPC caller expects. answer
// is the downstream's last answer (the last attempt's own error), if an
// attempt was made: when the breaker ended the retries after one, the caller
// gets that answer's status, and errors.Is(err, breaker.ErrOpen) still
// holds.
func toStatus(callerCtx context.Context, err, answer error) error {
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
	if errors.Is(err, callguard.ErrRejected) {
		// Refused locally (throttle, limit, bulkhead): the call was not
		// sent; the caller may try again later.
		return &statusError{status.New(codes.ResourceExhausted, err.Error()), err}
	}
	if errors.Is(err, breaker.ErrOpen) {
		if answer != nil {
			return &statusError{status.Convert(answer), err}
		}
		return &statusError{status.New(codes.Unavailable, err.Error()), err}
	}
	if errors.As(err, new(creationCut)) {
		return &statusError{unavailableCreation(err), err}
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

// Overloaded reports whether err is a downstream's refusal for overload:
// an answer with codes.ResourceExhausted from the server (not one grpc-go
// made itself, for a message over the send limit, which the interceptor
// marks neutral before a breaker sees it). Give it to the breaker of a
// chain that has a concurrency limit, as breaker.Settings.IsExcluded: the
// breaker then leaves fast overload refusals to the limit, which sheds
// just the excess, instead of opening on them and refusing everything for
// its stay (docs/protection.md: 8,163 successes against 7,142 when the
// downstream's capacity drops with a shallow queue under an open loop).
func Overloaded(err error) bool {
	var se interface{ GRPCStatus() *status.Status }
	return errors.As(err, &se) && se.GRPCStatus().Code() == codes.ResourceExhausted
}
