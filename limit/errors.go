package limit

import (
	"errors"
	"fmt"
	"time"

	"github.com/callguard/callguard"
)

// ErrLimited matches every call a [Limiter] or a [Bulkhead] refuses: each
// refusal is a [*RejectedError], for which errors.Is(err, ErrLimited) and
// errors.Is(err, callguard.ErrRejected) hold.
//
// Both policies share one sentinel: a refusal means the same thing whichever
// of them made it (the call was not sent because too many calls were in
// flight and the queue could not take it), and callers handle both the same
// way. [RejectedError.Reason] says why.
var ErrLimited = errors.New("limit: rejected")

// Reasons of a [RejectedError].
const (
	// ReasonQueueFull: every slot was taken and the queue was full (or
	// there is no queue); the call did not wait.
	ReasonQueueFull = "queue full"
	// ReasonMaxWait: the call waited in the queue for MaxWait without
	// getting a slot.
	ReasonMaxWait = "max wait"
)

// RejectedError is the error of every call a [Limiter] or a [Bulkhead]
// refuses, with the numbers behind the refusal as they were when it was
// made. Match it with errors.Is(err, [ErrLimited]) or
// errors.Is(err, callguard.ErrRejected), or read it with errors.As.
//
// A refusal allocates one RejectedError; the admission path allocates
// nothing. The zero RejectedError describes a refusal with unknown numbers.
type RejectedError struct {
	Limit    int           // the concurrency limit (a Bulkhead's MaxConcurrent)
	InFlight int           // calls in flight
	Queued   int           // calls waiting in the queue, not counting this one
	Waited   time.Duration // how long this call waited in the queue (0 for ReasonQueueFull)
	Reason   string        // ReasonQueueFull or ReasonMaxWait
}

// Error describes the refusal, e.g.
// "limit: rejected (queue full: 10 in flight, limit 10, 5 queued)" or
// "limit: rejected (max wait: waited 50ms; 10 in flight, limit 10, 3 queued)".
func (e *RejectedError) Error() string {
	reason := e.Reason
	if reason == "" {
		reason = "rejected"
	}
	if e.Waited > 0 {
		return fmt.Sprintf("limit: rejected (%s: waited %v; %d in flight, limit %d, %d queued)",
			reason, e.Waited, e.InFlight, e.Limit, e.Queued)
	}
	return fmt.Sprintf("limit: rejected (%s: %d in flight, limit %d, %d queued)",
		reason, e.InFlight, e.Limit, e.Queued)
}

// Is reports whether target is [ErrLimited] or callguard.ErrRejected.
func (e *RejectedError) Is(target error) bool {
	return target == ErrLimited || target == callguard.ErrRejected
}

// SettingsError reports an invalid field of [Settings], [BulkheadSettings],
// [AIMDSettings] or [Gradient2Settings].
type SettingsError struct {
	Field  string // the field, qualified by its struct, e.g. "BulkheadSettings.MaxConcurrent" or "AIMDSettings.BackoffRatio"
	Value  any    // the value given
	Reason string // what it must be
}

// Error names the field, its value and what it must be, e.g.
// "limit: BulkheadSettings.MaxConcurrent = 0: must be >= 1".
func (e *SettingsError) Error() string {
	return fmt.Sprintf("limit: %s = %v: %s", e.Field, e.Value, e.Reason)
}

func invalid(field string, v any, reason string) error {
	return &SettingsError{Field: field, Value: v, Reason: reason}
}

var errZero = errors.New("limit: a zero Limiter or Bulkhead admits no call; make one with New or NewBulkhead")
