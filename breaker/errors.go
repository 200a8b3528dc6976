package breaker

import (
	"errors"
	"strconv"
	"time"
)

// ErrOpen matches every call the breaker rejects: every rejection is an
// [*OpenError], for which errors.Is(err, ErrOpen) holds.
var ErrOpen = errors.New("breaker: open")

// ErrTooManyProbes matches the rejections in half-open when the probe quota
// is used up: errors.Is(err, ErrTooManyProbes) holds for an [*OpenError]
// whose Probes is set, and errors.Is(err, ErrOpen) holds for those too.
var ErrTooManyProbes error = probeQuotaError{}

type probeQuotaError struct{}

func (probeQuotaError) Error() string        { return "breaker: open (half-open probe quota used up)" }
func (probeQuotaError) Is(target error) bool { return target == ErrOpen }

// OpenError is the error of every call a [Breaker] rejects: which breaker
// rejected it, and until when. Match it with errors.Is(err, ErrOpen) (and
// errors.Is(err, ErrTooManyProbes) for a half-open rejection), or read it
// with errors.As.
//
// A breaker returns the same *OpenError for every rejection of one open
// stay (and of one half-open period), so a rejection allocates nothing:
// treat it as read-only. It is safe for concurrent use as long as nobody
// modifies it. The zero OpenError describes an unnamed open breaker with
// an unknown end.
type OpenError struct {
	// Name is the breaker's Settings.Name, or the Name of the gobreaker
	// breaker wrapped by FromGobreaker ("" if unnamed).
	Name string
	// Until is the first instant the breaker admits a call again: just
	// after the end of its open stay. It is zero in half-open (a probe may
	// be admitted as soon as one returns) and for a breaker made by
	// FromGobreaker (the wrapped breaker does not tell).
	Until time.Time
	// Probes reports a rejection in half-open because the probe quota was
	// used up.
	Probes bool
	// Forced reports a breaker an operator forced open ([Breaker.ForceOpen]):
	// it stays open until reset, and Until is zero.
	Forced bool
}

// Error names the breaker and says how long it stays open, e.g.
// `breaker "payments": open, 4.2s left` or
// `breaker: open (half-open probe quota used up)`.
func (e *OpenError) Error() string {
	s := "breaker"
	if e.Name != "" {
		s += " " + strconv.Quote(e.Name)
	}
	switch {
	case e.Forced:
		return s + ": forced open"
	case e.Probes:
		return s + ": open (half-open probe quota used up)"
	case e.Until.IsZero():
		return s + ": open"
	}
	return s + ": open, " + roundLeft(e.Remaining()).String() + " left"
}

// Is reports whether target is [ErrOpen], or [ErrTooManyProbes] for a
// rejection in half-open.
func (e *OpenError) Is(target error) bool {
	return target == ErrOpen || e.Probes && target == ErrTooManyProbes
}

// Remaining returns how long until the breaker admits a call again
// (Until - now), or 0 if Until is zero or past.
func (e *OpenError) Remaining() time.Duration {
	if e.Until.IsZero() {
		return 0
	}
	return max(time.Until(e.Until), 0)
}

// roundLeft rounds a time left for a message: to a tenth of a second from
// a second on, to a millisecond from a millisecond on.
func roundLeft(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d
}
