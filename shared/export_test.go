package shared

import "time"

// WithSkew is o for an instance whose wall clock is off by d: every time
// it reads or writes in Redis is shifted by d, as on a machine whose clock
// is wrong (its durations, and its breaker's, are not).
func WithSkew(o Options, d time.Duration) Options {
	o.skew = d
	return o
}
