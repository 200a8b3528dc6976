package throttle

import (
	"errors"
	"strconv"
	"time"

	"github.com/callguard/callguard"
)

// ErrThrottled matches every call a [Throttle] rejects: every rejection is
// a [*RejectedError], for which errors.Is(err, ErrThrottled) and
// errors.Is(err, callguard.ErrRejected) hold.
var ErrThrottled = errors.New("throttle: rejected")

// RejectedError is the error of every call a [Throttle] rejects: the
// rejection probability and the window's counts at the decision. Match it
// with errors.Is(err, ErrThrottled) or errors.Is(err, callguard.ErrRejected),
// or read it with errors.As. Each rejection returns a new RejectedError
// (the only allocation a Throttle makes per call); it is safe for
// concurrent use as long as nobody modifies it. The zero RejectedError
// describes a rejection with p = 0 over an empty window.
type RejectedError struct {
	// Probability is the rejection probability p the call was refused
	// with, after the MaxRejectionRate cap.
	Probability float64
	// Requests and Accepts are the window's counts when the call was
	// decided, before it was counted.
	Requests, Accepts int
	// Window is the throttle's Settings.Window.
	Window time.Duration
}

// Error gives p and the counts behind it, e.g.
// "throttle: rejected (p = 0.42: 120 requests, 35 accepts over 1m0s)".
func (e *RejectedError) Error() string {
	b := make([]byte, 0, 80)
	b = append(b, "throttle: rejected (p = "...)
	b = strconv.AppendFloat(b, e.Probability, 'f', 2, 64)
	b = append(b, ": "...)
	b = strconv.AppendInt(b, int64(e.Requests), 10)
	b = append(b, " requests, "...)
	b = strconv.AppendInt(b, int64(e.Accepts), 10)
	b = append(b, " accepts over "...)
	b = append(b, e.Window.String()...)
	b = append(b, ')')
	return string(b)
}

// Is reports whether target is [ErrThrottled] or callguard.ErrRejected.
func (e *RejectedError) Is(target error) bool {
	return target == ErrThrottled || target == callguard.ErrRejected
}
