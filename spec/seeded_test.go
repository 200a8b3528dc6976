package spec_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/spec"
)

// TestSeeded: two chains built from one Seeded spec wait the same jittered
// waits; another seed waits others.
func TestSeeded(t *testing.T) {
	s, err := spec.Parse([]byte(`chain:
  - retry: {attempts: 5, exponential: {initial: 100ms, max: 1s}, jitter: 0.5}
`))
	if err != nil {
		t.Fatal(err)
	}
	took := func(s *spec.Spec) time.Duration {
		var d time.Duration
		synctest.Test(t, func(t *testing.T) {
			c, err := s.Chain()
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_ = c.Do(context.Background(), func(context.Context) error { return errors.New("down") })
			d = time.Since(start)
		})
		return d
	}
	a, b, other := took(s.Seeded(7)), took(s.Seeded(7)), took(s.Seeded(8))
	if a != b || a == other || a == 1500*time.Millisecond {
		t.Errorf("seed 7: %v and %v, seed 8: %v; want the same jittered waits for one seed (not the nominal 1.5s), others for another", a, b, other)
	}
}
