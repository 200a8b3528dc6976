package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
)

// Report is everything a lab run measured: what --json writes and what the
// terminal and --report show.
type Report struct {
	Mode      string      `json:"mode"`  // "quick" or "full"
	Proto     string      `json:"proto"` // "http", "grpc" or "both"
	Started   time.Time   `json:"started"`
	Elapsed   float64     `json:"elapsed_s"`
	Tables    []*Table    `json:"tables"`
	Timelines []*Timeline `json:"timelines,omitempty"`
	Clock     string      `json:"clock,omitempty"` // whose time the timelines are in ("": the seed's)
}

// Table is one experiment's results, printed as the seed prints it.
type Table struct {
	ID        string     `json:"id"`    // "A1", "C2", …
	Title     string     `json:"title"` // what it is
	Proto     string     `json:"proto,omitempty"`
	Scale     float64    `json:"scale"` // durations × this (1: the seed's own)
	Setup     string     `json:"setup,omitempty"`
	Columns   []string   `json:"columns"`
	Rows      [][]Cell   `json:"rows"`
	Findings  []string   `json:"findings,omitempty"` // the lint's, verbatim, for the bad configuration
	Chains    []string   `json:"chains,omitempty"`   // the configurations compared
	Tolerance string     `json:"tolerance,omitempty"`
	Pass      bool       `json:"pass"`
	Unjudged  bool       `json:"unjudged,omitempty"` // measured only: no reference to judge against (Pass is then meaningless)
	Verdict   string     `json:"verdict"`
	Notes     []string   `json:"notes,omitempty"` // where a measured value differs from the reference, why
	checks    []checkRes // the comparisons behind the verdict
}

// Cell is one value: measured, with its unit, and the seed's reference
// where there is one.
type Cell struct {
	Text      string   `json:"text"`
	Value     *float64 `json:"value,omitempty"`
	Unit      string   `json:"unit,omitempty"`
	Reference *float64 `json:"reference,omitempty"`
}

type checkRes struct {
	what string
	ok   bool
}

func text(s string) Cell { return Cell{Text: s} }

// num is a measured number with a unit, and its reference (NaN: none).
func num(v float64, unit string, ref float64, format string) Cell {
	c := Cell{Text: fmt.Sprintf(format, v), Value: &v, Unit: unit}
	if !math.IsNaN(ref) {
		c.Reference = &ref
		c.Text += fmt.Sprintf(" (seed "+format+")", ref)
	}
	return c
}

var none = math.NaN()

// check compares a measured value with its reference, within tol
// (absolute), and records the result for the table's verdict.
func (t *Table) check(what string, got, want, tol float64) bool {
	ok := math.Abs(got-want) <= tol
	t.checks = append(t.checks, checkRes{what: fmt.Sprintf("%s: %.3g (seed %.3g, ± %.3g)", what, got, want, tol), ok: ok})
	return ok
}

// expect records a condition the table's verdict rests on.
func (t *Table) expect(what string, ok bool) {
	t.checks = append(t.checks, checkRes{what: what, ok: ok})
}

// judge sets the verdict from the checks.
func (t *Table) judge() {
	var failed []string
	for _, c := range t.checks {
		if !c.ok {
			failed = append(failed, c.what)
		}
	}
	t.Pass = len(failed) == 0
	if t.Pass {
		t.Verdict = fmt.Sprintf("reproduced: %d of %d values within tolerance", len(t.checks), len(t.checks))
	} else {
		t.Verdict = fmt.Sprintf("NOT reproduced: %d of %d values off: %s", len(failed), len(t.checks), strings.Join(failed, "; "))
	}
}

// print writes the table for a terminal.
func (t *Table) print(w io.Writer) {
	title := t.ID + " " + t.Title
	if t.Proto != "" {
		title += " — over " + strings.ToUpper(t.Proto)
	}
	fmt.Fprintf(w, "\n%s\n%s\n", title, strings.Repeat("=", len([]rune(title))))
	if t.Setup != "" {
		fmt.Fprintln(w, wrap(t.Setup, 100))
	}
	if t.Scale != 1 && t.Scale != 0 {
		fmt.Fprintf(w, "(quick: durations × %g, reported in the seed's time, ÷ %g)\n", t.Scale, t.Scale)
	}
	for i, c := range t.Chains {
		fmt.Fprintf(w, "  configuration %d: %s\n", i+1, c)
	}
	for _, f := range t.Findings {
		fmt.Fprintf(w, "  lint: %s\n", wrap(f, 100))
	}
	widths := make([]int, len(t.Columns))
	for i, c := range t.Columns {
		widths[i] = len([]rune(c))
	}
	for _, r := range t.Rows {
		for i, c := range r {
			if i < len(widths) {
				widths[i] = max(widths[i], len([]rune(c.Text)))
			}
		}
	}
	line := func(cells []string) {
		for i, c := range cells {
			fmt.Fprintf(w, "| %s%s ", c, strings.Repeat(" ", widths[i]-len([]rune(c))))
		}
		fmt.Fprintln(w, "|")
	}
	line(t.Columns)
	seps := make([]string, len(widths))
	for i, n := range widths {
		seps[i] = strings.Repeat("-", n)
	}
	line(seps)
	for _, r := range t.Rows {
		cells := make([]string, len(t.Columns))
		for i := range cells {
			if i < len(r) {
				cells[i] = r[i].Text
			}
		}
		line(cells)
	}
	for _, n := range t.Notes {
		fmt.Fprintf(w, "  note: %s\n", wrap(n, 100))
	}
	if t.Tolerance != "" {
		fmt.Fprintf(w, "  tolerance: %s\n", t.Tolerance)
	}
	if t.Unjudged {
		fmt.Fprintf(w, "  (%s)\n", t.Verdict)
		return
	}
	fmt.Fprintf(w, "  verdict: %s\n", t.Verdict)
}

func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		if i > 0 {
			if n+1+len(word) > width {
				b.WriteString("\n    ")
				n = 4
			} else {
				b.WriteByte(' ')
				n++
			}
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}

// writeJSON writes the report to path.
func (r *Report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Timeline is one run's breaker states and request marks, in the seed's
// time, for the report's pictures.
type Timeline struct {
	ID       string         `json:"id"`
	Title    string         `json:"title"`
	Duration float64        `json:"duration_s"`
	States   []StateSpan    `json:"states"`
	Faults   [][2]float64   `json:"faults,omitempty"` // the downstream's fault windows, in seconds
	Marks    []TimelineMark `json:"marks"`
}

// StateSpan is a breaker state from From to To seconds.
type StateSpan struct {
	From  float64 `json:"from_s"`
	To    float64 `json:"to_s"`
	State string  `json:"state"`
}

// TimelineMark is one request's outcome at a time: ok, failure, rejected,
// timeout; or, with N, that many requests' in a bin starting then.
type TimelineMark struct {
	At   float64 `json:"at_s"`
	Kind string  `json:"kind"`
	N    int     `json:"n,omitempty"` // the requests it stands for (0: one)
}

func (m TimelineMark) count() int { return max(m.N, 1) }
