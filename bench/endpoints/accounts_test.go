package endpoints

import (
	"testing"
	"time"

	"github.com/callguard/callguard/endpoint"
)

// every is a request every step in [from, to).
func every(step, from, to time.Duration) []time.Duration {
	var out []time.Duration
	for t := from; t < to; t += step {
		out = append(out, t)
	}
	return out
}

const msec = time.Millisecond

// TestServerAccounts checks the server-side accounts of ejection and
// readmission on made-up arrivals: a pause of #0 while the fleet goes on
// is its ejection, a pause of the whole arm is not; #0 is back once it
// gets half its fair share.
func TestServerAccounts(t *testing.T) {
	bad, heal, end := 1000*msec, 3000*msec, 4000*msec
	fleet := every(msec, 0, end) // a thousand requests a second
	// #0 gets its share until 1,050 ms, probes at 1,600 and 2,200 ms,
	// its share again from 3,100 ms.
	b0 := append(append(every(10*msec, 0, 1050*msec), 1600*msec, 2200*msec), every(10*msec, 3100*msec, end)...)
	if got, want := quietFrom(b0, fleet, bad, heal), 40*msec; got != want {
		t.Errorf("quietFrom = %v, want %v (its last request before the pause)", got, want)
	}
	if got, want := backFrom(b0, fleet, heal, end), 100*msec; got != want {
		t.Errorf("backFrom = %v, want %v", got, want)
	}
	// The whole arm stalls from 1,000 to 1,400 ms: no pause of #0's alone.
	var stalled []time.Duration
	for _, x := range fleet {
		if x < bad || x >= 1400*msec {
			stalled = append(stalled, x)
		}
	}
	b0 = every(10*msec, 0, end)
	var b0stalled []time.Duration
	for _, x := range b0 {
		if x < bad || x >= 1400*msec {
			b0stalled = append(b0stalled, x)
		}
	}
	if got := quietFrom(b0stalled, stalled, bad, heal); got != none {
		t.Errorf("quietFrom over a stall of the whole arm = %v, want none", got)
	}
	if got := backFrom(b0, fleet, heal, end); got != 0 {
		t.Errorf("backFrom of a backend never out = %v, want 0", got)
	}
}

// TestReadmission checks the policy's account of #0's readmission.
func TestReadmission(t *testing.T) {
	clock := time.Now()
	at := func(d time.Duration) time.Time { return clock.Add(d) }
	heal := 3 * time.Second
	ch := func(d time.Duration, addr string, ejected bool) change {
		return change{at: at(d), Change: endpoint.Change{Endpoint: addr, Ejected: ejected}}
	}
	cases := []struct {
		name string
		chs  []change
		want time.Duration
	}{
		{"never ejected", nil, 0},
		{"readmitted before the heal", []change{ch(time.Second, "a", true), ch(2*time.Second, "a", false)}, 0},
		{"readmitted after", []change{ch(time.Second, "a", true), ch(3500*msec, "a", false)}, 500 * msec},
		{"another endpoint", []change{ch(time.Second, "a", true), ch(3200*msec, "b", false), ch(3700*msec, "a", false)}, 700 * msec},
		{"still ejected", []change{ch(time.Second, "a", true)}, none},
	}
	for _, c := range cases {
		if got := readmission(c.chs, "a", clock, heal); got != c.want {
			t.Errorf("%s: readmission = %v, want %v", c.name, got, c.want)
		}
	}
	// httpmw names an endpoint by its IP, the port being the URL's.
	if !is0("127.0.0.2", "127.0.0.2:8080") || !is0("127.0.0.2:8080", "127.0.0.2:8080") || is0("127.0.0.3", "127.0.0.2:8080") {
		t.Error("is0 does not tell backend #0 by its IP or its address")
	}
}
