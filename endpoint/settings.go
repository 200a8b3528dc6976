// Package endpoint judges each backend behind one name on its own: a
// breaker per endpoint (the kit's breaker, with its rules and settings),
// an endpoint whose breaker opens is ejected from the picks, probed back
// through half-open and readmitted, and never more than a share of the
// endpoints is ejected at once (a failure of the whole service stays the
// per-method or per-host breaker's to see). A retry or a hedge of a call
// made through an adapter goes to an endpoint its earlier attempts did not
// try, when there is one.
//
// The load-balancing layers use it: grpcmw's balancer (a grpc-go
// load-balancing policy, "callguard_endpoints") and httpmw's Endpoints
// transport (over the addresses a host resolves to). See docs/endpoints.md.
package endpoint

import (
	"errors"
	"fmt"
	"time"

	"github.com/callguard/callguard/breaker"
)

// The values a zero field of Settings keeps.
const (
	// DefaultConsecutiveFailures: an endpoint failing this many calls in
	// a row is ejected (Envoy's consecutive_5xx is 5).
	DefaultConsecutiveFailures = 5
	// DefaultOpenTimeout is an ejection's first stay; it doubles while the
	// endpoint's probes fail, up to DefaultMaxOpenTimeout: a healed
	// endpoint is probed within that of its heal.
	DefaultOpenTimeout    = 500 * time.Millisecond
	DefaultMaxOpenTimeout = time.Second
	// DefaultHalfOpenProbes calls probe an ejected endpoint;
	// DefaultHalfOpenSuccesses of them readmit it. One: a probe that
	// fails is a caller's call that fails (a call that may be retried is
	// preferred for it, see Pick), and Envoy readmits with none.
	DefaultHalfOpenProbes    = 1
	DefaultHalfOpenSuccesses = 1
	// DefaultMaxEjectionPercent of the endpoints may be ejected at once
	// (at least one of two or more).
	DefaultMaxEjectionPercent = 10
	// The slow threshold is the larger of DefaultSlowFactor times the
	// median endpoint's typical answer time and that time plus
	// DefaultSlowMargin: an endpoint whose own typical time (a moving
	// average of its answers) is past it fails its answers, as does a
	// call that a deadline ended after running past it (a hang).
	DefaultSlowFactor = 3.0
	DefaultSlowMargin = 5 * time.Millisecond
)

// Settings configure the endpoints of a service. A zero field keeps its
// default (the Default constants).
type Settings struct {
	// Breaker is each endpoint's breaker. Its zero value is the default
	// breaker for an endpoint: DefaultConsecutiveFailures in a row,
	// open DefaultOpenTimeout growing to DefaultMaxOpenTimeout,
	// DefaultHalfOpenSuccesses of DefaultHalfOpenProbes probes to close.
	// Its OnStateChange, if set, is called for every endpoint's breaker;
	// its Name is prefixed to the endpoint's address.
	Breaker breaker.Settings
	// MaxEjectionPercent is the most of the endpoints ejected at once, in
	// percent (at least one of two or more; none of one). An endpoint
	// whose breaker opens beyond it is not ejected: its breaker is closed
	// again and goes on counting.
	MaxEjectionPercent int
	// SlowFactor and SlowMargin judge a slow endpoint: see
	// DefaultSlowFactor. A negative SlowFactor turns the judgement off
	// (a call a deadline ended is then neutral to its endpoint).
	SlowFactor float64
	SlowMargin time.Duration
	// OnChange, if set, is told of each ejection and readmission, with no
	// lock held.
	OnChange func(Change)
}

// Change is an endpoint's ejection or readmission.
type Change struct {
	Service  string // the set's name (a gRPC target, an HTTP host)
	Endpoint string // the endpoint's address
	Ejected  bool   // true: ejected; false: readmitted
	// Capped reports an endpoint whose breaker opened while the most
	// endpoints allowed were ejected: it was not ejected (Ejected false).
	Capped bool
}

// Error is an invalid Settings: Field names it.
type Error struct {
	Field string
	Err   error
}

func (e *Error) Error() string { return fmt.Sprintf("endpoint: Settings.%s: %v", e.Field, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// withDefaults checks s and fills its zero fields.
func (s Settings) withDefaults() (Settings, error) {
	if s.MaxEjectionPercent < 0 || s.MaxEjectionPercent > 100 {
		return s, &Error{"MaxEjectionPercent", fmt.Errorf("%d is outside [0, 100]", s.MaxEjectionPercent)}
	}
	if s.MaxEjectionPercent == 0 {
		s.MaxEjectionPercent = DefaultMaxEjectionPercent
	}
	if s.SlowMargin < 0 {
		return s, &Error{"SlowMargin", errors.New("negative")}
	}
	if s.SlowFactor > 0 && s.SlowFactor < 1 {
		return s, &Error{"SlowFactor", fmt.Errorf("%g is below 1: every endpoint would be slow", s.SlowFactor)}
	}
	if s.SlowFactor == 0 {
		s.SlowFactor = DefaultSlowFactor
	}
	if s.SlowMargin == 0 {
		s.SlowMargin = DefaultSlowMargin
	}
	b := s.Breaker
	if b.ConsecutiveFailures == 0 && b.FailureRate == 0 && b.SlowCallRate == 0 {
		b.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if b.OpenTimeout == 0 {
		b.OpenTimeout = DefaultOpenTimeout
		if b.MaxOpenTimeout == 0 {
			b.MaxOpenTimeout = DefaultMaxOpenTimeout
		}
	}
	if b.HalfOpenProbes == 0 && !b.SkipHalfOpen {
		b.HalfOpenProbes = DefaultHalfOpenProbes
		if b.HalfOpenSuccesses == 0 {
			b.HalfOpenSuccesses = DefaultHalfOpenSuccesses
		}
	}
	if b.Engine == breaker.EngineGobreaker {
		return s, &Error{"Breaker.Engine", errors.New("an endpoint's breaker is the native engine (ejection caps close it again, which gobreaker cannot)")}
	}
	if _, err := breaker.New(b); err != nil {
		return s, &Error{"Breaker", err}
	}
	s.Breaker = b
	return s, nil
}

// maxEjected is how many of n endpoints may be ejected at once.
func (s *Settings) maxEjected(n int) int {
	if n < 2 {
		return 0
	}
	return max(1, n*s.MaxEjectionPercent/100)
}
