package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestQuantity(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		unit string
		want string
	}{
		{1780, "ms", "1,780 ms"},
		{1752.6, "ms", "1,753 ms"},
		{702.64, "ms", "702.6 ms"},
		{700, "ms", "700 ms"},
		{3.1, "ms", "3.1 ms"},
		{0.04, "ms", "0.04 ms"},
		{15.0612, "s", "15.06 s"},
		{24878, "calls", "24,878 calls"},
		{1234567, "", "1,234,567"},
		{-1500, "ms", "-1,500 ms"},
		{2.1, "", "2.1"},
		{0, "", "0"},
	} {
		if got := quantity(tc.v, tc.unit); got != tc.want {
			t.Errorf("quantity(%v, %q) = %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
}

// TestVerdictUnits: a value off is listed with its unit, the seed's, and
// the tolerance, readably; a count's tolerance reads "exact".
func TestVerdictUnits(t *testing.T) {
	tb := &Table{}
	tb.checkTime("native transition 2", 1780, 1750, 15, "ms")
	tb.check("native reached the downstream", 79, 80, 0, "calls")
	tb.between("giving up: median", 6.2, math.Inf(-1), 5, "ms", true)
	tb.between("the breaker opened", 1.62, 1, 1.5, "s", true)
	tb.judge()
	want := "NOT reproduced: 4 of 4 values off: native transition 2: 1,780 ms (reference 1,750 ms, ± 15 ms); " +
		"native reached the downstream: 79 calls (reference 80 calls, exact); giving up: median: 6.2 ms (at most 5 ms); " +
		"the breaker opened: 1.62 s (want 1.00 s to 1.50 s)"
	if tb.Pass || tb.Verdict != want {
		t.Errorf("verdict:\n%s\nwant:\n%s", tb.Verdict, want)
	}
}

// TestVerdictNoise: the measured noise widens a timing value's tolerance
// upwards only, by the noise in the seed's time; counts stay exact, but a
// count paced by a timer is allowed the calls a late timer can move (4
// crossings × the noise in 50 ms intervals, rounded up), either way; the
// verdict says what the noise was.
func TestVerdictNoise(t *testing.T) {
	noise := &Noise{Period: 1, Samples: 9000, P50: 0.1, P99: 4, Max: 20, Allowance: 40} // × 0.5: 40 ms in the reference's time
	for _, tc := range []struct {
		name string
		add  func(*Table)
		pass bool
	}{
		{"52 ms late, within 15 + 40", func(tb *Table) { tb.checkTime("t", 752, 700, 15, "ms") }, true},
		{"56 ms late, beyond 15 + 40", func(tb *Table) { tb.checkTime("t", 756, 700, 15, "ms") }, false},
		{"early is never noise", func(tb *Table) { tb.checkTime("t", 684, 700, 15, "ms") }, false},
		{"a time in seconds", func(tb *Table) { tb.checkTime("t", 15.78, 15, 0.75, "s") }, true},
		{"a time in seconds, beyond", func(tb *Table) { tb.checkTime("t", 15.8, 15, 0.75, "s") }, false},
		{"a count stays exact", func(tb *Table) { tb.check("n", 81, 80, 0, "calls") }, false},
		// 40 ms of noise, a call every 50 ms: one interval or part, × 4 crossings.
		{"a paced count, within 4 calls", func(tb *Table) { tb.checkPaced("n", 76, 80, "calls", 50, 4) }, true},
		{"a paced count, more", func(tb *Table) { tb.checkPaced("n", 84, 80, "calls", 50, 4) }, true},
		{"a paced count, beyond", func(tb *Table) { tb.checkPaced("n", 75, 80, "calls", 50, 4) }, false},
		{"not a timing value", func(tb *Table) { tb.check("t", 752, 700, 15, "ms") }, false},
		{"a range, late", func(tb *Table) { tb.between("t", 1.53, 1, 1.5, "s", true) }, true},
		{"an upper bound", func(tb *Table) { tb.between("t", 44, math.Inf(-1), 5, "ms", true) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := &Table{Noise: noise}
			tc.add(tb)
			tb.judge()
			if tb.Pass != tc.pass {
				t.Errorf("pass %t, want %t: %s", tb.Pass, tc.pass, tb.Verdict)
			}
			if !strings.Contains(tb.Verdict, "scheduling noise: a bare 1 ms timer woke up to 20 ms late (p99 4 ms, 9,000 samples)") {
				t.Errorf("the verdict does not give the noise: %s", tb.Verdict)
			}
			timing := tb.checks[0].timing
			if says := strings.Contains(tb.Verdict, "allowed that much later (40 ms in the reference's time)"); says != timing {
				t.Errorf("the verdict says the allowance: %t; want %t (a timing value): %s", says, timing, tb.Verdict)
			}
		})
	}
	tb := &Table{Noise: noise}
	tb.checkPaced("native reached the downstream", 72, 80, "calls", 50, 4)
	tb.judge()
	if !strings.Contains(tb.Verdict, "native reached the downstream: 72 calls (reference 80 calls, exact on time, ± 4 calls of noise)") ||
		!strings.Contains(tb.Verdict, "each count paced by a timer up to 4 calls off") {
		t.Errorf("a paced count off does not say the calls it was allowed: %s", tb.Verdict)
	}
	// 60 ms of noise: two intervals or part, 8 calls.
	tb = &Table{Noise: &Noise{Period: 1, Samples: 9000, Max: 30, Allowance: 60}}
	tb.checkPaced("n", 72, 80, "calls", 50, 4)
	tb.judge()
	if !tb.Pass {
		t.Errorf("8 calls off with 60 ms of noise, a call every 50 ms across 4 bounds: %s", tb.Verdict)
	}
	// No noise measured: a paced count is exact.
	tb = &Table{}
	tb.checkPaced("n", 79, 80, "calls", 50, 4)
	tb.judge()
	if tb.Pass || !strings.Contains(tb.Verdict, "n: 79 calls (reference 80 calls, exact)") {
		t.Errorf("a paced count without noise: %s", tb.Verdict)
	}
	tb = &Table{Noise: noise}
	tb.checkTime("native transition 1", 760, 700, 15, "ms")
	tb.judge()
	if !strings.Contains(tb.Verdict, "native transition 1: 760 ms (reference 700 ms, ± 15 ms + 40 ms of noise)") {
		t.Errorf("a timing value off does not say the noise it was allowed: %s", tb.Verdict)
	}
}

// TestStrict: a table not reproduced leaves the exit status 0 and says so;
// with --strict it is 1. The noise is in --json.
func TestStrict(t *testing.T) {
	saved := experiments
	t.Cleanup(func() { experiments = saved })
	experiments = []experiment{
		{"X1", "a table not reproduced", 0, 1, false, true, func(l *lab, _ string) error {
			time.Sleep(20 * time.Millisecond) // some samples of noise
			tb := &Table{ID: "X1", Title: "off", Scale: 1, Columns: []string{"v"}, Rows: [][]Cell{{text("2")}}}
			tb.check("v", 2, 1, 0, "")
			l.add(tb)
			return nil
		}},
		{"X2", "a table reproduced", 0, 1, false, true, func(l *lab, _ string) error {
			time.Sleep(20 * time.Millisecond)
			tb := &Table{ID: "X2", Title: "on", Scale: 1, Columns: []string{"v"}, Rows: [][]Cell{{text("1")}}}
			tb.check("v", 1, 1, 0, "")
			l.add(tb)
			return nil
		}},
	}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--only", "X"}, 0, "2 tables in"},
		{[]string{"--only", "X", "--strict"}, 1, "Exit status 1 (--strict)."},
		{[]string{"--only", "X2", "--strict"}, 0, "1 reproduced, 0 not"},
	} {
		out := filepath.Join(t.TempDir(), "x.json")
		var stdout, stderr bytes.Buffer
		code := run(append(tc.args, "--json", out), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String(), tc.says) {
			t.Errorf("%v: exit %d, want %d; output:\n%s%s\nwant it to say %q", tc.args, code, tc.code, stdout.String(), stderr.String(), tc.says)
		}
		if tc.code == 0 && strings.Contains(stdout.String(), "1 not") && !strings.Contains(stdout.String(), "Exit status 0 all the same: --strict makes it 1.") {
			t.Errorf("%v: a table not reproduced, exit 0, and the output does not say why:\n%s", tc.args, stdout.String())
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var r Report
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if r.NoiseSamples == 0 || len(r.Tables) == 0 || r.Tables[0].Noise == nil || r.Tables[0].Noise.Samples == 0 || r.Tables[0].Noise.Period != 1 {
			t.Errorf("%v: --json has no noise: report %d samples, first table %+v", tc.args, r.NoiseSamples, r.Tables[0].Noise)
		}
	}
}
