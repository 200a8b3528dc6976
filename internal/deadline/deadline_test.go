package deadline

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestLeft: the time a caller has left, from its context's deadline alone.
func TestLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		soon, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		past, cancelPast := context.WithDeadline(context.Background(), now.Add(-time.Second))
		defer cancelPast()
		for _, tc := range []struct {
			name   string
			caller context.Context
			want   time.Duration
		}{
			{"nil", nil, 0},
			{"no deadline", context.Background(), 0},
			{"300ms", soon, 300 * time.Millisecond},
			{"past", past, 1},
		} {
			if got := Left(tc.caller, now); got != tc.want {
				t.Errorf("%s: Left = %v; want %v", tc.name, got, tc.want)
			}
		}
	})
}
