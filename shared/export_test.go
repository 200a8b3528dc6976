package shared

import "time"

// WithSkew is o for an instance whose wall clock is off by d: every time
// it reads or writes in Redis is shifted by d, as on a machine whose clock
// is wrong (its durations, and its breaker's, are not).
func WithSkew(o Options, d time.Duration) Options {
	o.skew = d
	return o
}

// WithObserver is o with observe told, when each Redis operation returns,
// how long it ran (from its call to its return, a wait for the one before
// included), how far past its deadline it returned (negative: before) and
// its error.
func WithObserver(o Options, observe func(took, late time.Duration, err error)) Options {
	o.observe = observe
	return o
}
