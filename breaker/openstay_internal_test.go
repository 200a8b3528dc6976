package breaker

import (
	"math"
	"testing"
	"time"
)

// TestOpenStayNearMaxDuration: the doubling open stay stops at
// MaxOpenTimeout, also where doubling would pass what a Duration holds.
func TestOpenStayNearMaxDuration(t *testing.T) {
	b, err := New(Settings{ConsecutiveFailures: 1, OpenTimeout: time.Second, MaxOpenTimeout: math.MaxInt64})
	if err != nil {
		t.Fatal(err)
	}
	prev := time.Duration(0)
	for streak := range 70 {
		b.m.streak = streak
		d := b.m.openStay()
		if d < prev || d < time.Second {
			t.Fatalf("streak %d: stay %v after %v", streak, d, prev)
		}
		prev = d
	}
	if prev != math.MaxInt64 {
		t.Errorf("stay after 70 trips %v, want MaxOpenTimeout", prev)
	}
}
