package breaker

import (
	"fmt"
	"math"
	"time"
)

// Engine selects the state machine behind a [Breaker].
type Engine int

const (
	// EngineNative is callguard's own state machine: every field of
	// [Settings] is available and the closed-state success path takes no lock.
	EngineNative Engine = iota
	// EngineGobreaker runs the breaker on github.com/sony/gobreaker/v2, the
	// reference implementation. [New] rejects settings gobreaker cannot
	// express (WindowCalls, SlowCall, SlowCallRate, MaxOpenTimeout,
	// HalfOpenSuccesses below HalfOpenProbes, SkipHalfOpen), and counts it
	// cannot hold: ConsecutiveFailures, HalfOpenProbes or MinCalls above
	// math.MaxUint32.
	EngineGobreaker
)

// String returns "native" or "gobreaker".
func (e Engine) String() string {
	switch e {
	case EngineNative:
		return "native"
	case EngineGobreaker:
		return "gobreaker"
	default:
		return fmt.Sprintf("Engine(%d)", int(e))
	}
}

// Defaults applied by [New] to zero fields (SEEDS D: the usual production
// starting point).
const (
	// DefaultConsecutiveFailures and DefaultFailureRate are the trip rules used
	// when Settings names none: 10 consecutive failures, or 50 % failures
	// over DefaultWindow once DefaultMinCalls calls are in it.
	DefaultConsecutiveFailures = 10
	DefaultFailureRate         = 0.5
	DefaultWindow              = 10 * time.Second
	DefaultMinCalls            = 20
	DefaultOpenTimeout         = 10 * time.Second
	DefaultHalfOpenProbes      = 3
)

// windowBuckets is the number of buckets a time Window is split into: rates
// are exact to a tenth of the window.
const windowBuckets = 10

// Settings configures a [Breaker]. The zero value is valid and gives the
// documented defaults: trip on 10 consecutive failures or on a 50 % failure
// rate over 10 s (at least 20 calls), stay open 10 s, admit 3 half-open
// probes and close when all 3 succeed.
//
// Trip rules are independent: the breaker opens when any enabled rule
// fires. Rates are evaluated when a failure or a slow call is recorded.
type Settings struct {
	// Name labels the breaker in errors, String and the gobreaker engine.
	Name string

	// ConsecutiveFailures trips the breaker after this many failures in a row
	// (0: rule off).
	ConsecutiveFailures int
	// ConsecutiveFor makes the run of ConsecutiveFailures trip only once
	// it has lasted this long, from its first failure, with no success
	// between (0: at once). Under concurrency and at a high call rate,
	// ten failures in a row come within milliseconds from a downstream
	// that answers most calls (at 70 % failures, one run in 36 calls): a
	// downstream that is down fails every call for as long as it is down,
	// and one that is only flaky answers some call within a fraction of a
	// second. Native engine only.
	ConsecutiveFor time.Duration
	// FailureRate trips the breaker when failures/calls over the window reach
	// it, in [0, 1] (0: rule off).
	FailureRate float64
	// Window is the sliding time window for FailureRate and SlowCallRate,
	// kept as a ring of 10 buckets (O(1) per call). 0 with a rate rule and no
	// WindowCalls: DefaultWindow.
	Window time.Duration
	// WindowCalls makes the window the last N calls instead of a time span.
	// Set Window or WindowCalls, not both.
	WindowCalls int
	// MinCalls is the number of calls the window must hold before a rate can
	// trip. 0: DefaultMinCalls for a time window, WindowCalls for a count
	// window.
	MinCalls int
	// SlowCall marks a success that took longer than this as slow (0: off).
	// A call that ran longer than this and then returned an unmarked error
	// after its caller's context deadline had passed (the deadline ended it:
	// not a cancellation) counts as slow too, instead of neutral, so that a
	// hung downstream still trips SlowCallRate when every caller's deadline
	// is shorter than the hang. Such a call is neither a success nor a
	// failure: it leaves the run of consecutive failures as it is, and
	// Counts reports it as SlowUnanswered. A probe in half-open that its
	// caller's deadline ended stays neutral.
	SlowCall time.Duration
	// SlowCallRate trips the breaker when slow/calls over the window reach it,
	// in [0, 1]. Needs SlowCall.
	SlowCallRate float64

	// OpenTimeout is the first stay in open (0: DefaultOpenTimeout). The
	// breaker leaves open on the first call strictly after the stay, as
	// gobreaker does.
	OpenTimeout time.Duration
	// MaxOpenTimeout, when above OpenTimeout, makes the stay double on each
	// trip not followed by a close (30 s, 60 s, 120 s, …), capped at this;
	// a close resets it. With SkipHalfOpen the close at the end of a stay
	// is provisional: the stay goes back to OpenTimeout only once the
	// breaker has stayed closed at least as long as the last stay without
	// tripping, and a trip sooner doubles it again. 0: the stay is always
	// OpenTimeout.
	MaxOpenTimeout time.Duration
	// HalfOpenProbes is the number of calls admitted in half-open
	// (0: DefaultHalfOpenProbes).
	HalfOpenProbes int
	// HalfOpenSuccesses is the number of successes among the probes that
	// closes the breaker; a failure that makes it unreachable re-opens.
	// 0: HalfOpenProbes (gobreaker's rule: all probes must succeed).
	HalfOpenSuccesses int
	// SkipHalfOpen makes the breaker close at the end of the open stay with
	// its window cleared, without probing (SEEDS C.4's breaker). With
	// MaxOpenTimeout, the stay keeps growing while the breaker trips again
	// within the last stay's length of closing.
	// SkipHalfOpen cannot be combined with HalfOpenProbes or
	// HalfOpenSuccesses.
	SkipHalfOpen bool

	// IsFailure decides whether an error counts as a failure; false counts
	// it as a success. nil: any non-nil error is a failure. It is asked
	// only about errors that nothing has decided yet: an error marked with
	// [Neutral], [Failure] or [NotFailure] (as the gRPC and HTTP adapters
	// mark caller errors and the client's own conditions) counts as
	// marked, and an unmarked error returned after the caller's own
	// context is done is neutral (or slow: see SlowCall).
	IsFailure func(error) bool
	// IsExcluded marks errors that are neither success nor failure (for
	// example a caller's invalid argument); asked only about unmarked
	// errors whose caller's context is not done, before IsFailure.
	IsExcluded func(error) bool
	// OnStateChange is called after each transition, with no lock held, in
	// the order the transitions happened. It may call State and Counts. It
	// may run on the goroutine of a call other than the one that caused the
	// transition, State's included: an open stay that ended
	// moves the breaker on when State reads it, so a lock OnStateChange
	// takes must not be held around State. If it panics, the panic goes
	// on in the call that was delivering the change, and the receivers
	// still to be called get it at the breaker's next event.
	OnStateChange func(from, to State)

	// Engine selects the state machine (EngineNative by default).
	Engine Engine
}

// AttemptFailureRate is the FailureRate at which a breaker inside a retry
// of attempts attempts trips when the share requestRate of the requests
// fail: the breaker sees attempts, and a request fails when all its
// attempts do, so with independent failures a FailureRate r of attempts
// is r^attempts of requests. It is requestRate^(1/attempts), rounded to a
// percent: 0.79 for half the requests with 3 attempts (0.79³ ≈ 0.49),
// where FailureRate 0.5 trips when an eighth of them fail. The lint's
// CG027 says so of a chain; package preset sets it.
func AttemptFailureRate(requestRate float64, attempts int) float64 {
	if attempts < 1 {
		attempts = 1
	}
	return math.Round(100*math.Pow(requestRate, 1/float64(attempts))) / 100
}

// SettingsError reports an invalid field of [Settings].
type SettingsError struct {
	Field  string // the field's name, e.g. "FailureRate"
	Value  any    // the value given
	Reason string // what it must be
}

// Error names the field, its value and what it must be.
func (e *SettingsError) Error() string {
	return fmt.Sprintf("breaker: Settings.%s = %v: %s", e.Field, e.Value, e.Reason)
}

func invalid(field string, v any, reason string) error {
	return &SettingsError{Field: field, Value: v, Reason: reason}
}

func validRate(r float64) bool { return !math.IsNaN(r) && r >= 0 && r <= 1 }

// normalize validates s and fills its defaults.
func (s Settings) normalize() (Settings, error) {
	switch {
	case s.ConsecutiveFailures < 0:
		return s, invalid("ConsecutiveFailures", s.ConsecutiveFailures, "must be >= 0")
	case s.ConsecutiveFor < 0:
		return s, invalid("ConsecutiveFor", s.ConsecutiveFor, "must be >= 0")
	case s.ConsecutiveFor > 0 && s.ConsecutiveFailures == 0:
		return s, invalid("ConsecutiveFor", s.ConsecutiveFor, "set, but ConsecutiveFailures is 0: no run of failures to time")
	case !validRate(s.FailureRate):
		return s, invalid("FailureRate", s.FailureRate, "must be within [0, 1]")
	case s.Window < 0:
		return s, invalid("Window", s.Window, "must be >= 0")
	case s.WindowCalls < 0:
		return s, invalid("WindowCalls", s.WindowCalls, "must be >= 0")
	case s.Window > 0 && s.WindowCalls > 0:
		return s, invalid("WindowCalls", s.WindowCalls, "set Window or WindowCalls, not both")
	case s.MinCalls < 0:
		return s, invalid("MinCalls", s.MinCalls, "must be >= 0")
	case s.SlowCall < 0:
		return s, invalid("SlowCall", s.SlowCall, "must be >= 0")
	case !validRate(s.SlowCallRate):
		return s, invalid("SlowCallRate", s.SlowCallRate, "must be within [0, 1]")
	case s.SlowCallRate > 0 && s.SlowCall == 0:
		return s, invalid("SlowCall", s.SlowCall, "must be > 0 when SlowCallRate is set")
	case s.SlowCall > 0 && s.SlowCallRate == 0:
		return s, invalid("SlowCallRate", s.SlowCallRate, "must be > 0 when SlowCall is set")
	case s.OpenTimeout < 0:
		return s, invalid("OpenTimeout", s.OpenTimeout, "must be >= 0")
	case s.MaxOpenTimeout < 0:
		return s, invalid("MaxOpenTimeout", s.MaxOpenTimeout, "must be >= 0")
	case s.HalfOpenProbes < 0:
		return s, invalid("HalfOpenProbes", s.HalfOpenProbes, "must be >= 0")
	case s.HalfOpenSuccesses < 0:
		return s, invalid("HalfOpenSuccesses", s.HalfOpenSuccesses, "must be >= 0")
	case s.SkipHalfOpen && (s.HalfOpenProbes > 0 || s.HalfOpenSuccesses > 0):
		return s, invalid("SkipHalfOpen", s.SkipHalfOpen, "cannot be combined with HalfOpenProbes or HalfOpenSuccesses")
	case s.Engine != EngineNative && s.Engine != EngineGobreaker:
		return s, invalid("Engine", s.Engine, "must be EngineNative or EngineGobreaker")
	}
	rates := s.FailureRate > 0 || s.SlowCallRate > 0
	if !rates && s.ConsecutiveFailures == 0 {
		if s.Window > 0 || s.WindowCalls > 0 || s.MinCalls > 0 {
			return s, invalid("FailureRate", s.FailureRate, "a window or MinCalls is set but no rate rule uses it")
		}
		s.ConsecutiveFailures = DefaultConsecutiveFailures
		s.FailureRate = DefaultFailureRate
		rates = true
	}
	if !rates {
		switch {
		case s.Window > 0:
			return s, invalid("Window", s.Window, "set, but neither FailureRate nor SlowCallRate uses it")
		case s.WindowCalls > 0:
			return s, invalid("WindowCalls", s.WindowCalls, "set, but neither FailureRate nor SlowCallRate uses it")
		case s.MinCalls > 0:
			return s, invalid("MinCalls", s.MinCalls, "set, but neither FailureRate nor SlowCallRate uses it")
		}
	} else {
		if s.Window == 0 && s.WindowCalls == 0 {
			s.Window = DefaultWindow
		}
		if s.MinCalls == 0 {
			if s.WindowCalls > 0 {
				s.MinCalls = s.WindowCalls
			} else {
				s.MinCalls = DefaultMinCalls
			}
		}
		if s.WindowCalls > 0 && s.MinCalls > s.WindowCalls {
			return s, invalid("MinCalls", s.MinCalls, fmt.Sprintf("must be <= WindowCalls (%d), or no rate can trip", s.WindowCalls))
		}
		if s.Window > 0 && s.Window < windowBuckets {
			return s, invalid("Window", s.Window, "must be at least 10ns")
		}
	}
	if s.OpenTimeout == 0 {
		s.OpenTimeout = DefaultOpenTimeout
	}
	if s.MaxOpenTimeout > 0 && s.MaxOpenTimeout < s.OpenTimeout {
		return s, invalid("MaxOpenTimeout", s.MaxOpenTimeout, fmt.Sprintf("must be >= OpenTimeout (%v), or 0 for a fixed stay", s.OpenTimeout))
	}
	if !s.SkipHalfOpen {
		if s.HalfOpenProbes == 0 {
			s.HalfOpenProbes = DefaultHalfOpenProbes
		}
		if s.HalfOpenSuccesses == 0 {
			s.HalfOpenSuccesses = s.HalfOpenProbes
		}
		if s.HalfOpenSuccesses > s.HalfOpenProbes {
			return s, invalid("HalfOpenSuccesses", s.HalfOpenSuccesses, fmt.Sprintf("must be <= HalfOpenProbes (%d), or the breaker can never close", s.HalfOpenProbes))
		}
	}
	if s.Engine == EngineGobreaker {
		if err := gobreakerExpressible(s); err != nil {
			return s, err
		}
	}
	return s, nil
}
