package adapter

import (
	"strings"
	"testing"
	"time"
)

// FuzzServerAdvice: the two parsers of a server's retry advice never
// panic, and give an all-digit value the same meaning, in their units: an
// HTTP Retry-After of n seconds waits as long as a grpc-retry-pushback-ms
// of n×1000 milliseconds, and a number too large for a Duration is Forever
// (a wait past any MaxPushback: no retry) in both, however many digits.
// Other values differ by protocol, as their specifications say: a
// malformed Retry-After is no advice (RFC 9110: the backoff applies), a
// malformed or negative pushback is "do not retry" (gRFC A6).
func FuzzServerAdvice(f *testing.F) {
	for _, s := range []string{"", "0", "1", "120", "-1", "+5", " 5", "5 ", "1.5", "0x10", "007",
		"9223372036", "9223372037", "9223372036854775807", "9223372036854775808", "18446744073709551616",
		"99999999999999999999999999999999", "Wed, 21 Oct 2015 07:28:00 GMT", "Sun, 06 Nov 1994 08:49:37 GMT", "١٢٣"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		wait, ok := RetryAfter(v, now)
		pb := PushbackMs(v)
		if ok && wait < 0 {
			t.Fatalf("RetryAfter(%q) = %v: a negative wait", v, wait)
		}
		if !digits(v) {
			if pb != -1 {
				t.Fatalf("PushbackMs(%q) = %v, want -1 (do not retry) for a value not all digits", v, pb)
			}
			return
		}
		if !ok {
			t.Fatalf("RetryAfter(%q): no advice for digits", v)
		}
		switch {
		case wait == Forever:
			// n seconds do not fit a Duration: n milliseconds may, but are
			// then at least 9,223,372,036 ms (106 days), past any
			// MaxPushback a client sets: no retry either way.
			if pb != Forever && pb < (Forever/time.Second)*time.Millisecond {
				t.Fatalf("%q: Retry-After Forever but pushback %v", v, pb)
			}
		case pb == Forever:
			t.Fatalf("%q: pushback Forever but Retry-After %v", v, wait)
		case wait != pb*1000:
			t.Fatalf("%q: Retry-After %v but pushback %v ×1000 = %v", v, wait, pb, pb*1000)
		}
		if n := strings.TrimLeft(v, "0"); len(n) > 19 && (wait != Forever || pb != Forever) {
			t.Fatalf("%q: %d significant digits: want Forever from both, got %v and %v", v, len(n), wait, pb)
		}
	})
}
