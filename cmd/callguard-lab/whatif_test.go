package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/internal/scenario"
	"github.com/callguard/callguard/preset"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// whatIfRun runs the lab with args and --json, and returns its report and
// what it printed.
func whatIfRun(t *testing.T, args ...string) (*Report, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "w.json")
	var stdout, stderr bytes.Buffer
	if code := run(append(args, "--json", out), &stdout, &stderr); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return &r, stdout.String()
}

// rowsOf returns a what-if table's successes by row name.
func rowsOf(t *testing.T, tb *Table) map[string]int {
	t.Helper()
	rows := map[string]int{}
	for _, row := range tb.Rows {
		v := row[len(row)-1].Value
		if v == nil {
			t.Fatalf("%s: row %q has no successes value", tb.ID, row[0].Text)
		}
		rows[row[0].Text] = int(*v)
	}
	return rows
}

func alikeCounts(a, b int) bool {
	d := math.Abs(float64(a - b))
	return d <= 10 || d <= 0.01*math.Max(float64(a), float64(b))
}

// TestWhatIfExplains: the tables explain themselves (issue 22). A legend
// before them defines the load, each scenario and each column; every
// table has the baselines (the recommended chain, no protection) even for
// a chain already in the canonical order; and its reading states the
// table's own numbers: your chain's successes, and how many more or fewer
// than each baseline.
func TestWhatIfExplains(t *testing.T) {
	r, stdout := whatIfRun(t, "--chain", "../../spec/testdata/example.yaml")
	legend, _, _ := strings.Cut(stdout, "\nW1 scenario")
	for _, want := range []string{
		"load open60: an open loop", "184 a second", "1s deadline",
		`"healed N s after it started" is when the downstream itself is healthy again`,
		"W1 outage: every request refused at once", "W2 blackhole: every answer hangs", "W3 hang20: 20 % of the answers hang",
		"W5 capacity30-deep: the same with a queue of 1000",
		"W8 delay100: every answer comes 100 ms later", "W11 bimodal10: 10 % of the answers come 500 to 800 ms later",
		"W12 client-stall: the callers' own host stalls every 2 s",
	} {
		if !strings.Contains(strings.Join(strings.Fields(legend), " "), want) {
			t.Errorf("the legend lacks %q:\n%s", want, legend)
		}
	}
	if len(r.Tables) != len(scenario.Scenarios) {
		t.Fatalf("%d tables, want one per scenario (%d)", len(r.Tables), len(scenario.Scenarios))
	}
	for _, c := range r.Tables[0].Columns[1:] {
		if !strings.Contains(legend, "    "+c+": ") {
			t.Errorf("the legend does not define the column %q", c)
		}
	}
	for _, tb := range r.Tables {
		rows := rowsOf(t, tb)
		if len(rows) != 3 || !hasAll(rows, rowYours, rowRecommended, rowNone) {
			t.Errorf("%s: rows %v; want your chain, the recommended chain and no protection", tb.ID, rows)
			continue
		}
		if !strings.Contains(tb.Setup, "healed") || !strings.HasPrefix(tb.Setup, strings.TrimPrefix(tb.Title, "scenario ")+": ") {
			t.Errorf("%s: setup %q; want the scenario defined, and when it healed", tb.ID, tb.Setup)
		}
		if len(tb.Notes) == 0 {
			t.Fatalf("%s: no reading", tb.ID)
		}
		rd := tb.Notes[0]
		checkReading(t, tb.ID, rd, rows, rowRecommended)
		if want := fmt.Sprintf("no protection keeps %s.", count3(rows[rowNone])); !strings.Contains(rd, want) {
			t.Errorf("%s: reading %q lacks %q", tb.ID, rd, want)
		}
	}
}

func hasAll(rows map[string]int, names ...string) bool {
	for _, n := range names {
		if _, ok := rows[n]; !ok {
			return false
		}
	}
	return true
}

// checkReading checks that a reading states the table's numbers: your
// chain's successes, and the difference with other's.
func checkReading(t *testing.T, id, rd string, rows map[string]int, other string) {
	t.Helper()
	yours, theirs := rows[rowYours], rows[other]
	if want := fmt.Sprintf("reading: your chain keeps %s successes: ", count3(yours)); !strings.HasPrefix(rd, want) {
		t.Errorf("%s: reading %q; want it to begin %q", id, rd, want)
	}
	var want string
	switch d := yours - theirs; {
	case alikeCounts(yours, theirs):
		want = fmt.Sprintf("as many as the %s (%s, within 1 %%)", other, count3(theirs))
	case d > 0:
		want = fmt.Sprintf("%s more than the %s (%s)", count3(d), other, count3(theirs))
	default:
		want = fmt.Sprintf("%s fewer than the %s (%s)", count3(-d), other, count3(theirs))
	}
	if !strings.Contains(rd, want) {
		t.Errorf("%s: reading %q lacks %q (successes %v)", id, rd, want, rows)
	}
}

// TestWhatIfReadingHonest: a chain the lint warns about (the breaker
// outside the retry: CG002) keeps more successes than the canonical order
// in some scenarios. The reading says so, naming the finding and what in
// the numbers may explain it, exactly where the table shows it, and
// nowhere else.
func TestWhatIfReadingHonest(t *testing.T) {
	r, stdout := whatIfRun(t, "--chain", "testdata/flagged.yaml")
	if !strings.Contains(stdout, "warning CG002") {
		t.Fatalf("no CG002 for the breaker outside the retry:\n%s", stdout)
	}
	more := 0
	for _, tb := range r.Tables {
		rows := rowsOf(t, tb)
		if len(rows) != 4 || !hasAll(rows, rowYours, rowCanonical, rowRecommended, rowNone) {
			t.Fatalf("%s: rows %v; want your chain, the canonical order and both baselines", tb.ID, rows)
		}
		rd := tb.Notes[0]
		checkReading(t, tb.ID, rd, rows, rowCanonical)
		checkReading(t, tb.ID, rd, rows, rowRecommended)
		says := strings.Contains(rd, "The lint warns about your chain (CG002), yet here it keeps more than the canonical order: it may be because")
		kept := rows[rowYours] > rows[rowCanonical] && !alikeCounts(rows[rowYours], rows[rowCanonical])
		if says != kept {
			t.Errorf("%s: successes %v; the reading says it keeps more despite the lint: %t, want %t:\n%s", tb.ID, rows, says, kept, rd)
		}
		if kept {
			more++
		}
	}
	if more == 0 {
		t.Errorf("the flagged chain kept more than the canonical order nowhere; the test needs a table where it does")
	}
}

// TestWhatIfCallerDeadline is issue 22's chain: a 10 s attempt timeout
// and 5 attempts, callers with a 1 s deadline. The lint says, before any
// table, that the breaker never opens on a hung downstream (CG004, in
// numbers), and the blackhole's row shows it: never tripped, every caller
// waiting its whole second, one call per request.
func TestWhatIfCallerDeadline(t *testing.T) {
	r, stdout := whatIfRun(t, "--chain", "testdata/slow.yaml", "--only", "W2")
	lint, _, _ := strings.Cut(stdout, "\nW2 scenario")
	flat := strings.Join(strings.Fields(lint), " ")
	for _, want := range []string{"warning CG004", "never sees a hung downstream fail", "once it has run 5s", "ends every hung attempt at 1s", "waits out its whole 1s", "4 of its 5 attempts never made"} {
		if !strings.Contains(flat, want) {
			t.Errorf("the lint before the tables lacks %q:\n%s", want, lint)
		}
	}
	if len(r.Tables) != 1 {
		t.Fatalf("%d tables, want W2 only", len(r.Tables))
	}
	for _, row := range r.Tables[0].Rows {
		if row[0].Text != rowYours {
			continue
		}
		if amp := *row[1].Value; row[2].Text != "never" || row[4].Text != "1s / 1s" || amp != 1 {
			t.Errorf("blackhole, your chain: trip %q, p50 / p99 %q, %v calls per request; want never, 1s / 1s, 1", row[2].Text, row[4].Text, amp)
		}
	}
}

// TestWhatIfOnly: --only selects the what-if's scenarios, by id or by
// name, and one that selects none is an error naming it and listing them
// (it was ignored).
func TestWhatIfOnly(t *testing.T) {
	for _, tc := range []struct {
		only string
		ids  []string
	}{
		{"W2", []string{"W2"}},
		{"w4, blackhole", []string{"W2", "W4"}},
		{"capacity30", []string{"W4", "W5"}},
		{"delay, W12", []string{"W8", "W9", "W10", "W12"}},
	} {
		t.Run(tc.only, func(t *testing.T) {
			r, _ := whatIfRun(t, "--chain", "../../spec/testdata/example.yaml", "--only", tc.only)
			var ids []string
			for _, tb := range r.Tables {
				ids = append(ids, tb.ID)
			}
			if !slices.Equal(ids, tc.ids) {
				t.Errorf("--only %q: tables %v, want %v", tc.only, ids, tc.ids)
			}
		})
	}
	for _, only := range []string{"A1", "W2,C4"} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"--chain", "../../spec/testdata/example.yaml", "--only", only}, &stdout, &stderr)
		bad := only[strings.LastIndex(only, ",")+1:]
		if code != 1 || !strings.Contains(stderr.String(), fmt.Sprintf("%q selects no scenario", bad)) || !strings.Contains(stderr.String(), "W2 blackhole") || strings.Contains(stdout.String(), "scenario ") {
			t.Errorf("--only %s: exit %d, %q, %d bytes of output; want 1, naming %s and the scenarios, and no table", only, code, stderr.String(), stdout.Len(), bad)
		}
	}
}

// TestWhatIfAllSpecErrors: a file with six errors gets all six, each with
// its file, line and field, the unknown policy a suggestion.
func TestWhatIfAllSpecErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--chain", "testdata/errors.yaml"}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	re := regexp.MustCompile(`^(callguard-lab: )?spec: testdata/errors\.yaml:(\d+): (\S+): `)
	var at []string
	for _, l := range lines {
		if m := re.FindStringSubmatch(l); m != nil {
			at = append(at, m[2]+" "+m[3])
		}
	}
	want := []string{"3 lint.maxDetection", "6 chain[0].retry.atempts", "7 chain[0].retry.jitter", "8 chain[1].circuitBreaker", "11 chain[2].breaker.openTimout", "12 chain[3].timeout"}
	if !slices.Equal(at, want) {
		t.Errorf("errors at %v, want %v:\n%s", at, want, stderr.String())
	}
	if !strings.Contains(stderr.String(), `circuitBreaker: unknown policy; a policy is one of timeout, retry, breaker, throttle, hedge, limit, bulkhead (did you mean "breaker"?)`) {
		t.Errorf("no suggestion for the unknown policy:\n%s", stderr.String())
	}
}

// TestScaleStays: --live scales each breaker's open stays with the
// timeline, and nothing else of the chain.
func TestScaleStays(t *testing.T) {
	b, err := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: time.Second, MaxOpenTimeout: 8 * time.Second, HalfOpenProbes: 2})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := retry.New(retry.MaxAttempts(3))
	to, _ := timeout.New(300 * time.Millisecond)
	ps, err := scaleStays([]chain.Policy{r, b, to}, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	nb, ok := ps[1].(*breaker.Breaker)
	if !ok || ps[0] != r || ps[2] != to || nb == b {
		t.Fatalf("scaleStays: %v; want the retry and timeout kept, a new breaker", ps)
	}
	got, was := nb.Settings(), b.Settings()
	if got.OpenTimeout != 100*time.Millisecond || got.MaxOpenTimeout != 800*time.Millisecond || got.ConsecutiveFailures != 5 || got.HalfOpenProbes != 2 {
		t.Errorf("scaled settings %+v; want open 100ms → 800ms, the rest as %+v", got, was)
	}
}

// TestWhatIfLive: --live scales the chain's open stays with the timeline
// (× 0.1): the example chain's breaker stays open 0.1 s at a time on the
// blackhole, where it stayed its unscaled 1 s (a tenth of the run) and
// the chain was judged metastable; now it recovers, and its rows run side
// by side, in one scenario's time.
func TestWhatIfLive(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: 8 s")
	}
	start := time.Now()
	r, stdout := whatIfRun(t, "--chain", "../../spec/testdata/example.yaml", "--live", "--only", "W2")
	took := time.Since(start)
	if len(r.Tables) != 1 || len(r.Timelines) == 0 {
		t.Fatalf("%d tables, %d timelines; want W2's", len(r.Tables), len(r.Timelines))
	}
	stay := preset.DefaultOpenTimeout // example.yaml's too
	want := fmt.Sprintf("every breaker's open stay (%v for the recommended chain's %v)", stay/10, stay)
	if !strings.Contains(strings.Join(strings.Fields(stdout), " "), want) {
		t.Errorf("the header does not say the open stays are scaled:\n%s", stdout)
	}
	for _, n := range r.Tables[0].Notes {
		if strings.Contains(n, "metastable") {
			t.Errorf("blackhole, live: %s", n)
		}
	}
	var stays []float64
	for _, s := range r.Timelines[0].States {
		if s.State == "open" && s.To < r.Timelines[0].Duration {
			stays = append(stays, s.To-s.From)
		}
	}
	if s := stay.Seconds() / 10; len(stays) == 0 || slices.Max(stays) > 2*s || slices.Min(stays) < 0.9*s {
		t.Errorf("blackhole, live: open stays %v s; want the %v stay × 0.1 (%v s, up to scheduling)", stays, stay, s)
	}
	// 2 s of warm-up and 6 s measured: the 3 rows at once.
	if took > 14*time.Second {
		t.Errorf("one live scenario took %v; want about its 8 s, the rows side by side", took)
	}
}

// The what-if's captured run in docs/lab.md.
// TestMetastabilityJudged: live, a row is judged metastable from the run
// at the scenario's own durations in virtual time, and the live run's
// judgement is said beside it where they differ; in virtual time, from
// the run itself.
func TestMetastabilityJudged(t *testing.T) {
	sc := scenario.Scenarios[4]
	stuck := scenario.Result{Metastable: true, Recover: -1}
	back := scenario.Result{Recover: sc.Healed + 2*time.Second}
	for _, tc := range []struct {
		name        string
		res, judged scenario.Result
		live        bool
		want        string // a prefix; "" for no note
	}{
		{"virtual, metastable", stuck, stuck, false, "x: metastable: "},
		{"virtual, back", back, back, false, ""},
		{"live, both", stuck, stuck, true, "x: metastable, live and in virtual time"},
		{"live only", stuck, back, true, "x: not metastable: at the scenario's own durations, in virtual time, it recovers 2.0 s after the downstream. Live, fewer than half"},
		{"virtual only", back, stuck, true, "x: metastable in virtual time"},
		{"neither", back, back, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := metastability("x", tc.res, tc.judged, sc, tc.live)
			if tc.want == "" && got != "" || !strings.HasPrefix(got, tc.want) {
				t.Errorf("metastability = %q, want it to begin %q", got, tc.want)
			}
		})
	}
}
