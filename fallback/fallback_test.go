package fallback_test

import (
	"context"
	"errors"
	"testing"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/internal/bridge"
)

var errDown = errors.New("down")

func TestCovers(t *testing.T) {
	stale := func(ctx context.Context, err error) error { return nil }
	open, _ := fallback.New(stale)
	any, _ := fallback.New(stale, fallback.OnAnyFailure())
	custom, _ := fallback.New(stale, fallback.When(func(err error) bool { return errors.Is(err, errDown) }))
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	for _, tc := range []struct {
		p    *fallback.Policy
		ctx  context.Context
		err  error
		want bool
	}{
		{open, bg, breaker.ErrOpen, true},
		{open, bg, breaker.ErrTooManyProbes, true},
		{open, bg, errDown, false},
		{open, bg, nil, false},
		{any, bg, errDown, true},
		{any, canceled, context.Canceled, false},
		{custom, bg, errDown, true},
		{custom, bg, breaker.ErrOpen, false},
		{custom, canceled, errDown, false}, // never the caller's own end
	} {
		if got := bridge.FallbackOf(tc.p).Covers(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%v: covers(%v) = %t, want %t", tc.p, tc.err, got, tc.want)
		}
	}
	if _, err := fallback.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
}

// TestNoRunTimePanics: bad input is refused at construction, and the zero
// Policy passes results through.
func TestNoRunTimePanics(t *testing.T) {
	if p, err := fallback.New(func(context.Context, error) error { return nil }, fallback.When(nil)); p != nil || err == nil {
		t.Errorf("When(nil): %v, %v; want an error", p, err)
	}
	var zero fallback.Policy
	if err := zero.Do(context.Background(), func(context.Context) error { return errDown }); err != errDown || bridge.FallbackOf(&zero).Covers(context.Background(), errDown) {
		t.Errorf("zero Policy: %v", err)
	}
}
