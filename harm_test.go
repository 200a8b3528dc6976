package callguard_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"testing"
	"time"
)

// TestNoHarmWhenSlower: a healthy downstream answering in about 2 ms gets
// about 50 times slower (100 ± 50 ms: a tenth of the callers' 1 s deadline)
// for 8 s, then fast again. Every answer still comes well within the
// deadline; a plain client loses none. The adaptive attempt timeout, sunk
// to its floor during the fast warm-up, must follow the slowdown instead
// of cutting every attempt and opening the breaker on a healthy
// downstream (issue: the breaker refused every request).
func TestNoHarmWhenSlower(t *testing.T) {
	for _, slow := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond} {
		t.Run(slow.String(), func(t *testing.T) {
			h := harmRun{callers: 20, deadline: time.Second, warm: 3 * time.Second, fault: 8 * time.Second, after: 3 * time.Second,
				backends: 1, seed: 1,
				answer: func(since time.Duration, _ int, rng *rand.Rand) (time.Duration, int) {
					if since >= 3*time.Second && since < 11*time.Second {
						return around(slow, rng), http.StatusOK
					}
					return around(2*time.Millisecond, rng), http.StatusOK
				}}
			plain, standard := h.run(t)
			t.Logf("\n%v\n%v", plain, standard)
			noHarm(t, "during the slowdown", 1, plain, standard, 0.98, h.callers)
			noHarm(t, "in the 3 s after it", 2, plain, standard, 0.98, h.callers)
		})
	}
}

// TestNoHarmWhenFlaky: a downstream that is not overloaded fails a share
// of its calls at once (503 in 2 ms). A plain client keeps the rest; the
// recommended chain, whose retry could keep more, must not refuse more than
// it gains (issue: 32 % of requests against a plain client's 49 % at 50 %
// failures, 1.5 % against 30 % at 70 %).
func TestNoHarmWhenFlaky(t *testing.T) {
	for _, fail := range []float64{0.3, 0.5, 0.7, 0.8} {
		t.Run(fmt.Sprintf("%.0f%%", 100*fail), func(t *testing.T) {
			h := harmRun{callers: 10, deadline: time.Second, warm: 2 * time.Second, fault: 6 * time.Second, after: time.Second,
				backends: 1, seed: 2,
				answer: func(since time.Duration, _ int, rng *rand.Rand) (time.Duration, int) {
					if since >= 2*time.Second && since < 8*time.Second && rng.Float64() < fail {
						return 2 * time.Millisecond, http.StatusServiceUnavailable
					}
					return around(4*time.Millisecond, rng), http.StatusOK
				}}
			plain, standard := h.run(t)
			t.Logf("\n%v\n%v", plain, standard)
			noHarm(t, "flaky downstream", 1, plain, standard, 0.98, h.callers)
		})
	}
}

// TestNoHarmOneBadBackend: one backend of ten behind one host fails every
// call at once. net/http's pool reuses the connection that just answered,
// so the requests after a failure go back to the bad backend: failures in
// a row, though nine backends of ten are healthy. The per-host breaker
// must not refuse the whole host (issue: 22.9 % of GETs succeeded against
// a plain client's 90 %).
func TestNoHarmOneBadBackend(t *testing.T) {
	h := harmRun{callers: 20, deadline: time.Second, warm: 2 * time.Second, fault: 8 * time.Second, after: time.Second,
		backends: 10, seed: 3,
		answer: func(since time.Duration, b int, rng *rand.Rand) (time.Duration, int) {
			if b == 0 && since >= 2*time.Second && since < 10*time.Second {
				return time.Millisecond, http.StatusServiceUnavailable
			}
			return around(4*time.Millisecond, rng), http.StatusOK
		}}
	plain, standard := h.run(t)
	t.Logf("\n%v\n%v", plain, standard)
	noHarm(t, "one bad backend of ten", 1, plain, standard, 0.98, h.callers)
}

// TestNoHarmWhenTheClientStalls: no fault at the downstream, but the
// client's own host stalls for 250 ms every 2 s (another process took its
// cores): an answer due during a stall is seen only at its end. Every
// attempt in flight ends late at once, and an attempt timeout sunk to its
// floor cuts them together; a breaker that counted them as a run of ten
// opened on a healthy server (issue: 3 opens in 8 s over real sockets,
// the host loaded by other work).
func TestNoHarmWhenTheClientStalls(t *testing.T) {
	const every, stall = 2 * time.Second, 250 * time.Millisecond
	h := harmRun{callers: 20, deadline: time.Second, warm: 3 * time.Second, fault: 8 * time.Second, after: time.Second,
		backends: 1, seed: 4,
		answer: func(since time.Duration, _ int, rng *rand.Rand) (time.Duration, int) {
			d := around(2*time.Millisecond, rng)
			if since < 3*time.Second || since >= 11*time.Second {
				return d, http.StatusOK
			}
			if at := (since + d) % every; at < stall {
				d += stall - at // seen when the stall ends
			}
			return d, http.StatusOK
		}}
	plain, standard := h.run(t)
	t.Logf("\n%v\n%v", plain, standard)
	noHarm(t, "the client's host stalling", 1, plain, standard, 0.98, h.callers)
	if standard.refused[1] > 0 {
		t.Errorf("the breaker refused %d requests to a healthy downstream, want none", standard.refused[1])
	}
}

// TestNoHarmWhenTheBodyIsSlow: the headers come at once and the body
// 250 ms after them (a link of little bandwidth: 8 KiB at 32 KB/s). The
// attempt's timeout bounds the body's read too; an adaptive timeout that
// learned only when the headers came sat at its floor and cut every body,
// and the breaker opened on the cut reads (over real sockets through a
// fault proxy: 21 of 9,885 requests against a plain client's 599 of 599).
// It learns from the whole answer now.
func TestNoHarmWhenTheBodyIsSlow(t *testing.T) {
	h := harmRun{callers: 20, deadline: time.Second, warm: 3 * time.Second, fault: 8 * time.Second, after: 3 * time.Second,
		backends: 1, seed: 5,
		answer: func(_ time.Duration, _ int, rng *rand.Rand) (time.Duration, int) {
			return around(2*time.Millisecond, rng), http.StatusOK
		},
		body: func(since time.Duration) time.Duration {
			if since >= 3*time.Second && since < 11*time.Second {
				return 250 * time.Millisecond
			}
			return 0
		}}
	plain, standard := h.run(t)
	t.Logf("\n%v\n%v", plain, standard)
	noHarm(t, "a slow body", 1, plain, standard, 0.98, h.callers)
	noHarm(t, "in the 3 s after it", 2, plain, standard, 0.98, h.callers)
}

// TestProtectionKept: where protection matters, the chain keeps it. A
// downstream that hangs every answer (a blackhole, or a server paused) or
// refuses every connection (an outage) for 3 s, then heals: the
// downstream receives no more calls from Standard than from a plain client
// with the same deadline; after the fault's first second requests fail
// fast (the median failure at once, and no more than 1 in 20 after 100 ms
// or more: the breaker's probes, and the calls a probe round holds back);
// and the first success comes within 1 s of the heal.
func TestProtectionKept(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
	}{{"blackhole", hang}, {"outage", refuse}} {
		t.Run(tc.name, func(t *testing.T) {
			h := harmRun{callers: 20, deadline: time.Second, warm: 3 * time.Second, fault: 3 * time.Second, after: 2 * time.Second,
				backends: 1, seed: 6,
				answer: func(since time.Duration, _ int, rng *rand.Rand) (time.Duration, int) {
					if since >= 3*time.Second && since < 6*time.Second {
						return 0, tc.status
					}
					return around(2*time.Millisecond, rng), http.StatusOK
				}}
			plain, standard := h.run(t)
			late := standard.failedLate
			slices.Sort(late)
			slow := len(late) - sort.Search(len(late), func(i int) bool { return late[i] >= 100*time.Millisecond })
			var median time.Duration
			if len(late) > 0 {
				median = late[len(late)/2]
			}
			t.Logf("\n%v; the downstream received %d calls during the fault\n%v; %d; in the fault's last 2 s %d requests failed, the median after %v, %d after 100 ms or more; first success %v after the heal",
				plain, plain.received1, standard, standard.received1, len(late), median, slow, standard.firstOKAfterFault)
			if standard.received1 > plain.received1 {
				t.Errorf("the downstream received %d calls from Standard during the fault, %d from a plain client: want no more", standard.received1, plain.received1)
			}
			if median >= 10*time.Millisecond || 20*slow > len(late) {
				t.Errorf("in the fault's last 2 s, %d requests failed, the median after %v, %d after 100 ms or more: want them to fail fast", len(late), median, slow)
			}
			if ok := standard.firstOKAfterFault; ok < 0 || ok > time.Second {
				t.Errorf("the first success came %v after the heal (-1: none), want within 1s", ok)
			}
		})
	}
}

// TestNoHarmInBursts: every connection reset for 250 ms of every second
// (a flapping link, a load balancer draining), healthy between; a reset
// comes 40 ms into an attempt (the client's pool tries a connection or
// two first), past the attempt timeout's floor, and one attempt in 50
// hangs. Its first attempts are cut together, nearly every attempt: a
// storm, whose scouts must let it end when they answer, and whose scout
// that hangs must not open the breaker on a later burst's failures (over
// real sockets: the breaker opened 7 times in 8 s, 1,152 of 11,734
// requests succeeded against a plain client's 10,697 of 13,655).
func TestNoHarmInBursts(t *testing.T) {
	h := harmRun{callers: 20, deadline: time.Second, warm: 2 * time.Second, fault: 8 * time.Second, after: 2 * time.Second,
		backends: 1, seed: 7,
		answer: func(since time.Duration, _ int, rng *rand.Rand) (time.Duration, int) {
			if since >= 2*time.Second && since < 10*time.Second && (since-2*time.Second)%time.Second < 250*time.Millisecond {
				if rng.Float64() < 0.02 {
					return 0, hang
				}
				return 40 * time.Millisecond, refuse
			}
			return around(2*time.Millisecond, rng), http.StatusOK
		}}
	plain, standard := h.run(t)
	t.Logf("\n%v\n%v", plain, standard)
	noHarm(t, "reset bursts", 1, plain, standard, 0.98, h.callers)
	noHarm(t, "after them", 2, plain, standard, 0.98, h.callers)
}
