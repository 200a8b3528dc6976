package scenario

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
)

// TestSeedDriversInProcess runs each seed driver in process, in virtual
// time, where the seeds' numbers are exact (the lab runs the same drivers
// over HTTP and gRPC in real time).
func TestSeedDriversInProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, engine := range []breaker.Engine{breaker.EngineNative, breaker.EngineGobreaker} {
			r, err := Transitions("in-process", engine, 1)
			if err != nil {
				t.Fatal(err)
			}
			var at []time.Duration
			for _, e := range r.Events {
				at = append(at, e.At)
			}
			want := []time.Duration{700, 1750, 1750, 2800, 2900, 4200, 5250, 5250, 6300, 6400}
			if len(at) != len(want) {
				t.Fatalf("%v: transitions at %v, want at %v ms", engine, at, want)
			}
			for i := range want {
				if at[i] != want[i]*time.Millisecond {
					t.Errorf("%v: transition %d at %v, want %vms", engine, i+1, at[i], want[i])
				}
			}
			if r.Reached != 80 || r.FailedReached != 12 || r.Open != 80 || r.Probes != 0 {
				t.Errorf("%v: reached %d (%d failed), rejected %d open, %d probes; want 80 (12), 80, 0", engine, r.Reached, r.FailedReached, r.Open, r.Probes)
			}
		}
		for _, outside := range []bool{false, true} {
			r, err := RetryOrder("in-process", outside)
			if err != nil {
				t.Fatal(err)
			}
			want := [4]int{5, 5, 15, 7}
			if outside {
				want = [4]int{2, 2, 5, 10}
			}
			if got := [4]int{r.OpenedAfter, r.Reached, r.Calls, r.Rejected}; got != want {
				t.Errorf("retry outside %t: got %v, want %v", outside, got, want)
			}
		}
		r, err := Reaction("in-process", 200*time.Millisecond, 1, 1)
		if err != nil || r.Open != time.Second || r.Calls != 5 {
			t.Errorf("C2 at 200ms, 1 caller: open %v, %d calls, %v; want 1s, 5", r.Open, r.Calls, err)
		}
		io, err := IntoOpen("in-process", true, 20, 1)
		if err != nil || io.Median != 375*time.Millisecond {
			t.Errorf("C3 retrying when open: median %v, %v; want 375ms", io.Median, err)
		}
		tail, err := Tail("in-process", 100*time.Millisecond, 1, 4)
		if err != nil || tail.Opens < 10 || tail.TimedOut == 0 || tail.Wasted != tail.TimedOut {
			t.Errorf("C4 at 100ms: %d opens, %d timed out, %d wasted, %v; want about 16 opens, every timeout wasted", tail.Opens, tail.TimedOut, tail.Wasted, err)
		}
	})
}
