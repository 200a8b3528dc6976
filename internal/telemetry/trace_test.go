package telemetry

import (
	"errors"
	"fmt"
	"testing"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/throttle"
)

// TestRejectReason: a rejection's callguard.reason is a short fixed value
// by what refused the call, never the error's text.
func TestRejectReason(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&breaker.OpenError{Name: "catalog"}, "breaker_open"},
		{fmt.Errorf("wrapped: %w", &breaker.OpenError{Name: "catalog"}), "breaker_open"},
		{&breaker.OpenError{Probes: true}, "breaker_probes"},
		{breaker.ErrTooManyProbes, "breaker_probes"},
		{&breaker.OpenError{Forced: true}, "breaker_forced"},
		{&retry.ExhaustedError{Attempts: 2, Last: errors.New("down"), Reason: retry.ReasonOpen}, "breaker_open"},
		{&throttle.RejectedError{Probability: 0.5}, "throttled"},
		{&limit.RejectedError{Reason: limit.ReasonQueueFull}, "queue_full"},
		{&limit.RejectedError{Reason: limit.ReasonMaxWait}, "max_wait"},
		{&limit.RejectedError{}, "rejected"},
		{fmt.Errorf("a policy of its own: %w", callguard.ErrRejected), "rejected"},
		{nil, "rejected"},
	} {
		if got := RejectReason(c.err); got != c.want {
			t.Errorf("RejectReason(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
