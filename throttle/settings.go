package throttle

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Defaults applied by [New] to zero fields. See the package documentation
// for the reasons behind each.
const (
	// DefaultK is the multiplier of accepts: the throttle starts rejecting
	// once fewer than 1 request in K is accepted (the SRE book's 2).
	DefaultK = 2.0
	// DefaultWindow is the span over which requests and accepts are
	// counted (failsafe-go's 1 minute; the SRE book uses 2 minutes).
	DefaultWindow = time.Minute
	// DefaultMaxRejectionRate caps the rejection probability, so that at
	// least 1 call in 10 still reaches the downstream and can find it
	// healed (failsafe-go's 0.9).
	DefaultMaxRejectionRate = 0.9
	// DefaultMinRequests is the number of requests the window must hold
	// before any call is rejected (the breaker's DefaultMinCalls).
	DefaultMinRequests = 20
)

// buckets is the number of buckets the Window is split into: the counts are
// exact to a tenth of the window.
const buckets = 10

// Settings configures a [Throttle]. The zero value is valid and gives the
// documented defaults: K 2, a 1-minute window, a rejection probability
// capped at 0.9, no rejection before 20 requests in the window, and the
// default acceptance rule (see IsAccepted).
type Settings struct {
	// K is the multiplier of accepts in p = (requests − K·accepts) /
	// (requests + 1): the throttle rejects nothing while at least 1
	// request in K is accepted. It must be at least 1 (1 rejects as soon
	// as a single request is refused; higher values tolerate more refusals
	// and let more load through to an overloaded downstream).
	// 0: DefaultK.
	K float64
	// Window is the sliding span over which requests and accepts are
	// counted, kept as a ring of 10 buckets (O(1) per call); it must be
	// at least 10ns. 0: DefaultWindow.
	Window time.Duration
	// MaxRejectionRate caps the rejection probability, in [0, 1]; 1 leaves
	// the formula uncapped (it stays below 1). 0: DefaultMaxRejectionRate.
	MaxRejectionRate float64
	// MinRequests is the number of requests the window must hold, before
	// the call being decided, for any call to be rejected; 1 sets no
	// minimum. 0: DefaultMinRequests.
	MinRequests int

	// IsAccepted decides whether a call that ended with a non-nil error
	// was accepted by the downstream (true) or refused (false). It is
	// asked only about errors nothing else has decided: a nil error is
	// accepted, and an error returned after the caller's own context
	// ended, or matching callguard.ErrRejected (another policy refused the
	// call locally), is neutral. nil: every other error is a refusal. The
	// gRPC and HTTP adapters pass their own classification here: IsAccepted
	// decides, for example, that an InvalidArgument answer was accepted.
	IsAccepted func(error) bool

	// Rand, if set, is the source of the draws that decide which requests
	// are rejected, rather than math/rand/v2's global source, so that a
	// run can be replayed (a simulation, a test): with rand.NewPCG(seed,
	// seq), the same requests are rejected. It is read under a lock of the
	// throttle's own (math/rand/v2's sources are not safe for concurrent
	// use), only while the throttle rejects some.
	Rand rand.Source
}

// SettingsError reports an invalid field of [Settings].
type SettingsError struct {
	Field  string // the field's name, e.g. "K"
	Value  any    // the value given
	Reason string // what it must be
}

// Error names the field, its value and what it must be, e.g.
// "throttle: Settings.K = 0.5: must be >= 1".
func (e *SettingsError) Error() string {
	return fmt.Sprintf("throttle: Settings.%s = %v: %s", e.Field, e.Value, e.Reason)
}

func invalid(field string, v any, reason string) error {
	return &SettingsError{Field: field, Value: v, Reason: reason}
}

// normalize validates s and fills its defaults.
func (s Settings) normalize() (Settings, error) {
	switch {
	case math.IsNaN(s.K) || math.IsInf(s.K, 0):
		return s, invalid("K", s.K, "must be a finite number >= 1")
	case s.K != 0 && s.K < 1:
		return s, invalid("K", s.K, "must be >= 1 (or 0 for the default, 2)")
	case s.Window < 0:
		return s, invalid("Window", s.Window, "must be >= 0")
	case s.Window > 0 && s.Window < buckets:
		return s, invalid("Window", s.Window, "must be at least 10ns")
	case math.IsNaN(s.MaxRejectionRate) || s.MaxRejectionRate < 0 || s.MaxRejectionRate > 1:
		return s, invalid("MaxRejectionRate", s.MaxRejectionRate, "must be within [0, 1]")
	case s.MinRequests < 0:
		return s, invalid("MinRequests", s.MinRequests, "must be >= 0")
	}
	if s.K == 0 {
		s.K = DefaultK
	}
	if s.Window == 0 {
		s.Window = DefaultWindow
	}
	if s.MaxRejectionRate == 0 {
		s.MaxRejectionRate = DefaultMaxRejectionRate
	}
	if s.MinRequests == 0 {
		s.MinRequests = DefaultMinRequests
	}
	return s, nil
}
