package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/internal/scenario"
)

// TestMain lets the test binary be the lab's downstream process too, as the
// lab re-executes itself (callguard-lab serve) for K1.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(serve(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// TestC1EndToEnd runs the lab's C1 over real HTTP and gRPC loopback
// servers, as `callguard-lab --only C1 --json FILE` does, and checks the
// JSON: 15 downstream calls with the retry inside the breaker, 5 outside.
func TestC1EndToEnd(t *testing.T) {
	out := filepath.Join(t.TempDir(), "lab.json")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--only", "C1", "--json", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	protos := map[string]bool{}
	for _, tb := range r.Tables {
		if tb.ID != "C1" {
			t.Errorf("table %s, want only C1", tb.ID)
			continue
		}
		protos[tb.Proto] = true
		if len(tb.Rows) != 2 || len(tb.Rows[0]) < 4 {
			t.Fatalf("%s: %d rows", tb.Proto, len(tb.Rows))
		}
		calls := func(row int) float64 { return *tb.Rows[row][3].Value }
		if calls(0) != 15 || calls(1) != 5 || *tb.Rows[0][3].Reference != 15 || *tb.Rows[1][3].Reference != 5 {
			t.Errorf("%s: %v and %v downstream calls; want 15 (retry inside) and 5 (outside), with the seed's 15 and 5", tb.Proto, calls(0), calls(1))
		}
		if !tb.Pass || !strings.Contains(strings.Join(tb.Findings, " "), "CG002") {
			t.Errorf("%s: pass %t, findings %v; want reproduced, with CG002", tb.Proto, tb.Pass, tb.Findings)
		}
	}
	if !protos["http"] || !protos["grpc"] {
		t.Errorf("protocols %v, want http and grpc", protos)
	}
	if !strings.Contains(stdout.String(), "retry wraps breaker") {
		t.Errorf("the printed table is missing:\n%s", stdout.String())
	}
}

// TestWhatIf runs --chain on the spec package's example, in virtual time:
// every scenario gets a table with the chain's numbers.
func TestWhatIf(t *testing.T) {
	t.Run("overload", func(t *testing.T) {
		// The overload policies' canonical places: the lab knows them.
		var stdout, stderr bytes.Buffer
		if code := run([]string{"--chain", "../../spec/testdata/overload.yaml"}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "already in the canonical order") {
			t.Errorf("spec/testdata/overload.yaml is in the canonical order, and the lab should say so:\n%s", stdout.String())
		}
	})
	var stdout, stderr bytes.Buffer
	out := filepath.Join(t.TempDir(), "w.json")
	dir := filepath.Join(t.TempDir(), "report")
	if code := run([]string{"--chain", "../../spec/testdata/example.yaml", "--json", out, "--report", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, _ := os.ReadFile(out)
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Tables) != len(scenario.Scenarios) {
		t.Fatalf("%d tables, want one per scenario (%d)", len(r.Tables), len(scenario.Scenarios))
	}
	if !strings.Contains(stdout.String(), "already in the canonical order") {
		t.Errorf("the example is in the canonical order, and the lab should say so:\n%s", stdout.String())
	}
	// A picture per scenario: the breaker's states, every request's mark,
	// the fault's windows; the outage trips the breaker.
	if len(r.Timelines) != len(r.Tables) {
		t.Fatalf("%d timelines for %d scenarios", len(r.Timelines), len(r.Tables))
	}
	for i, tl := range r.Timelines {
		n := 0
		for _, row := range r.Tables[i].Rows {
			if row[0].Text == "your chain" {
				n = int(*row[len(row)-1].Value)
			}
		}
		if len(tl.Faults) == 0 {
			t.Fatalf("timeline %s: no fault window", tl.ID)
		}
		ok := 0 // as the table counts them: ending from the fault's start to the horizon
		for _, m := range tl.Marks {
			if m.Kind == "ok" && m.At >= tl.Faults[0][0] && m.At < tl.Duration {
				ok += m.count()
			}
		}
		if ok != n || len(tl.States) == 0 {
			t.Errorf("timeline %s: %d ok marks (the table counts %d successes), %d fault windows, %d states", tl.ID, ok, n, len(tl.Faults), len(tl.States))
		}
	}
	if opened := slices.ContainsFunc(r.Timelines[0].States, func(s StateSpan) bool { return s.State == "open" }); !opened {
		t.Errorf("outage: the breaker never shown open: %v", r.Timelines[0].States)
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(page), "<svg"); n != len(r.Timelines) {
		t.Errorf("the report has %d pictures for %d scenarios", n, len(r.Timelines))
	}
	// Measured, not judged: no reference says what your chain should do.
	if n := strings.Count(string(page), ">MEASURED<"); n != 2*len(r.Tables) || strings.Contains(string(page), "reproduced") || strings.Contains(string(page), ">PASS<") {
		t.Errorf("the what-if page shows %d MEASURED badges for %d tables (want two each: list and verdict), or a pass", n, len(r.Tables))
	}
	for _, tb := range r.Tables {
		if !tb.Unjudged || tb.Pass {
			t.Errorf("%s: unjudged %t, pass %t; want a table measured only", tb.ID, tb.Unjudged, tb.Pass)
		}
	}
	var bad bytes.Buffer
	if code := run([]string{"--chain", "no-such-file.yaml"}, &bytes.Buffer{}, &bad); code != 1 || !strings.Contains(bad.String(), "no-such-file.yaml") {
		t.Errorf("a missing file: exit %d, %q; want 1 and the file's name", code, bad.String())
	}
}

// TestKillAndRestart is K1 over HTTP and over gRPC: a downstream process
// killed with SIGKILL and restarted; the breaker opens, probes and closes,
// every request within its deadline.
func TestKillAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: 8 s")
	}
	var stdout, stderr bytes.Buffer
	out := filepath.Join(t.TempDir(), "k.json")
	if code := run([]string{"--only", "K1", "--json", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, _ := os.ReadFile(out)
	var r Report
	if err := json.Unmarshal(b, &r); err != nil || len(r.Tables) != 2 || len(r.Timelines) != 2 {
		t.Fatalf("K1: %v, want a table and a timeline per protocol; %s", err, stdout.String())
	}
	for i, proto := range []string{"http", "grpc"} {
		tb, tl := r.Tables[i], r.Timelines[i]
		if tb.Proto != proto || !tb.Pass {
			t.Errorf("K1 %d: over %q, pass %t; want over %s, reproduced: %s", i, tb.Proto, tb.Pass, proto, tb.Verdict)
		}
		if tl.ID != "K1-"+proto || len(tl.Marks) == 0 || len(tl.Faults) != 1 ||
			!slices.ContainsFunc(tl.States, func(s StateSpan) bool { return s.State == "open" }) {
			t.Errorf("K1's timeline over %s: %+v", proto, tl)
		}
		// Every measured cell is a number with its unit, as in the other tables.
		for _, row := range tb.Rows {
			if c := row[1]; c.Value == nil || c.Unit == "" {
				t.Errorf("K1 over %s, %q: measured %q has no value or no unit (%v, %q)", proto, row[0].Text, c.Text, c.Value, c.Unit)
			}
		}
		if strings.HasPrefix(tl.Title, tl.ID+":") || len(tl.Refs) != 2 {
			t.Errorf("K1's timeline: title %q (the caption adds nothing before it), %d reference ticks, want 2", tl.Title, len(tl.Refs))
		}
		// The transitions read as text, not as a Go slice.
		if len(tb.Notes) == 0 || !strings.HasPrefix(tb.Notes[len(tb.Notes)-1], "transitions: closed → open at ") || strings.Contains(tb.Notes[len(tb.Notes)-1], "[") {
			t.Errorf("K1 over %s: transitions note %q", proto, tb.Notes)
		}
	}
}

// TestOutputsCheckedFirst: an output that cannot be written fails the run
// at once, before any experiment, with exit status 2 and a message naming
// the flag and the path; a --json file in the --report directory the run
// creates is fine.
func TestOutputsCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--json", filepath.Join(missing, "out.json")}, "--json " + filepath.Join(missing, "out.json")},
		{[]string{"--report", filepath.Join(dir, "r"), "--json", filepath.Join(dir, "r", "sub", "out.json")}, "--json " + filepath.Join(dir, "r", "sub", "out.json")},
		{[]string{"--json", dir}, "--json " + dir},
		{[]string{"--report", filepath.Join(file, "r")}, "--report " + filepath.Join(file, "r")},
		{[]string{"--chain", "../../spec/testdata/example.yaml", "--json", filepath.Join(missing, "out.json")}, "--json " + filepath.Join(missing, "out.json")},
	} {
		var stdout, stderr bytes.Buffer
		start := time.Now()
		code := run(c.args, &stdout, &stderr)
		if took := time.Since(start); code != 2 || !strings.Contains(stderr.String(), c.want) || took > 2*time.Second || stdout.Len() > 0 {
			t.Errorf("%q: exit %d after %v, %q on stderr, %q on stdout; want 2 at once and a message with %q", c.args, code, took, stderr.String(), stdout.String(), c.want)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed check created %s: %v", missing, err)
	}
	// The report's directory is created, and the JSON written in it.
	report := filepath.Join(dir, "out")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--only", "C1", "--proto", "http", "--report", report, "--json", filepath.Join(report, "out.json")}, &stdout, &stderr); code != 0 {
		t.Fatalf("--report %s --json %s/out.json: exit %d: %s", report, report, code, stderr.String())
	}
	for _, f := range []string{"index.html", "out.json"} {
		if _, err := os.Stat(filepath.Join(report, f)); err != nil {
			t.Error(err)
		}
	}
}
