package adapter

import (
	"testing"
	"time"
)

// TestSameMeaning: both adapters read the same absurd value the same way:
// digits too many for a Duration are a wait longer than any allowed
// (Forever), never "no advice"; what is not digits is no advice for
// Retry-After and "do not retry" for gRPC pushback, as their specs say.
func TestSameMeaning(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v       string
		after   time.Duration // Retry-After, in seconds
		afterOK bool
		ms      time.Duration // grpc-retry-pushback-ms
	}{
		{"0", 0, true, 0},
		{"1", time.Second, true, time.Millisecond},
		{"9223372036", 9223372036 * time.Second, true, 9223372036 * time.Millisecond},
		{"9223372037", Forever, true, 9223372037 * time.Millisecond},
		{"9223372036854775807", Forever, true, Forever},
		{"9223372036854775808", Forever, true, Forever},
		{"99999999999999999999", Forever, true, Forever},
		{"", 0, false, -1},
		{"-1", 0, false, -1},
		{"+5", 0, false, -1},
		{" 5", 0, false, -1},
		{"1.5", 0, false, -1},
		{"soon", 0, false, -1},
		{"Tue, 01 Dec 2026 00:00:30 GMT", 30 * time.Second, true, -1},
		{"Mon, 30 Nov 2026 00:00:00 GMT", 0, true, -1}, // a date past: at once
	} {
		if got, ok := RetryAfter(tc.v, now); got != tc.after || ok != tc.afterOK {
			t.Errorf("RetryAfter(%q) = %v, %t; want %v, %t", tc.v, got, ok, tc.after, tc.afterOK)
		}
		if got := PushbackMs(tc.v); got != tc.ms {
			t.Errorf("PushbackMs(%q) = %v, want %v", tc.v, got, tc.ms)
		}
	}
}
