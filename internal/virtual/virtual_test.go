package virtual_test

import (
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/internal/virtual"
)

// TestRun: an hour in a bubble passes at once, goroutines included, and a
// failure inside comes back as an error with its message.
func TestRun(t *testing.T) {
	var took time.Duration
	start := time.Now()
	err := virtual.Run(func(t *testing.T) {
		s := time.Now()
		done := make(chan struct{})
		go func() { time.Sleep(30 * time.Minute); close(done) }()
		time.Sleep(time.Hour)
		<-done
		took = time.Since(s)
	})
	if err != nil || took != time.Hour || time.Since(start) > 10*time.Second {
		t.Fatalf("got %v after %v of virtual time; want nil after 1h", err, took)
	}
	err = virtual.Run(func(t *testing.T) { t.Error("broken on purpose") })
	if err == nil || !strings.Contains(err.Error(), "broken on purpose") {
		t.Errorf("a failing run: got %v, want its message", err)
	}
}
