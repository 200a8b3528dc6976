package throttle_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/callguard/callguard/throttle"
)

func TestSettingsDefaults(t *testing.T) {
	th, err := throttle.New(throttle.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	got := th.Settings()
	if got.K != 2 || got.Window != time.Minute || got.MaxRejectionRate != 0.9 || got.MinRequests != 20 || got.IsAccepted != nil {
		t.Fatalf("Settings() = %+v, want K 2, Window 1m, MaxRejectionRate 0.9, MinRequests 20", got)
	}
	if got, want := th.String(), "throttle(K 2, window 1m0s, max 90%, min 20 requests)"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	var zero throttle.Throttle
	if got, want := zero.String(), "throttle(zero value: make one with throttle.New)"; got != want {
		t.Fatalf("zero String() = %q, want %q", got, want)
	}
}

func TestSettingsErrors(t *testing.T) {
	for _, tc := range []struct {
		s     throttle.Settings
		field string
		msg   string
	}{
		{throttle.Settings{K: 0.5}, "K", "throttle: Settings.K = 0.5: must be >= 1 (or 0 for the default, 2)"},
		{throttle.Settings{K: -1}, "K", ""},
		{throttle.Settings{K: math.NaN()}, "K", "throttle: Settings.K = NaN: must be a finite number >= 1"},
		{throttle.Settings{K: math.Inf(1)}, "K", ""},
		{throttle.Settings{Window: -time.Second}, "Window", "throttle: Settings.Window = -1s: must be >= 0"},
		{throttle.Settings{Window: 9}, "Window", "throttle: Settings.Window = 9ns: must be at least 10ns"},
		{throttle.Settings{MaxRejectionRate: -0.1}, "MaxRejectionRate", ""},
		{throttle.Settings{MaxRejectionRate: 1.5}, "MaxRejectionRate", "throttle: Settings.MaxRejectionRate = 1.5: must be within [0, 1]"},
		{throttle.Settings{MaxRejectionRate: math.NaN()}, "MaxRejectionRate", ""},
		{throttle.Settings{MinRequests: -1}, "MinRequests", "throttle: Settings.MinRequests = -1: must be >= 0"},
	} {
		th, err := throttle.New(tc.s)
		var se *throttle.SettingsError
		if th != nil || !errors.As(err, &se) || se.Field != tc.field {
			t.Errorf("New(%+v) = %v, %v; want a *SettingsError naming %s", tc.s, th, err, tc.field)
			continue
		}
		if tc.msg != "" && err.Error() != tc.msg {
			t.Errorf("New(%+v): got %q, want %q", tc.s, err, tc.msg)
		}
	}
	for _, s := range []throttle.Settings{{K: 1}, {Window: 10}, {MaxRejectionRate: 1}, {MinRequests: 1}} {
		if _, err := throttle.New(s); err != nil {
			t.Errorf("New(%+v): %v, want no error", s, err)
		}
	}
}
