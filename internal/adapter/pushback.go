package adapter

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// Forever is the wait a server asks for with a number of seconds or
// milliseconds too large for a Duration: longer than any a policy allows,
// so a retry gives up on it rather than treat it as no advice.
const Forever = time.Duration(math.MaxInt64)

// RetryAfter parses an HTTP Retry-After value at now: delay-seconds (digits
// only) or an HTTP date. ok is false for an empty or malformed value (no
// advice). Any number of seconds too large for a Duration, however many
// digits, is [Forever].
func RetryAfter(v string, now time.Time) (wait time.Duration, ok bool) {
	if v == "" {
		return 0, false
	}
	if digits(v) {
		return scaled(v, time.Second), true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

// PushbackMs parses a grpc-retry-pushback-ms value (gRFC A6): a number of
// milliseconds to wait, or, negative or malformed, "do not retry" (-1). Any
// number too large for a Duration is [Forever], as for Retry-After.
func PushbackMs(v string) time.Duration {
	if digits(v) {
		return scaled(v, time.Millisecond)
	}
	return -1
}

// digits reports a non-empty string of ASCII digits.
func digits(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}

// scaled is the all-digit v times unit, or Forever past a Duration.
func scaled(v string, unit time.Duration) time.Duration {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > uint64(math.MaxInt64/int64(unit)) {
		return Forever // out of range: digits enough for centuries
	}
	return time.Duration(n) * unit
}
