package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
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
	Clock     string      `json:"clock,omitempty"` // whose time the timelines are in ("": the reference's)
	// The run's worst scheduling noise (a bare timer's lateness, see
	// Table.Noise) over every real-time experiment, and its samples.
	NoiseMax     float64 `json:"noise_max_ms,omitempty"`
	NoiseSamples int     `json:"noise_samples,omitempty"`
}

// Table is one experiment's results, printed as the seed prints it.
type Table struct {
	ID        string   `json:"id"`    // "A1", "C2", …
	Title     string   `json:"title"` // what it is
	Proto     string   `json:"proto,omitempty"`
	Scale     float64  `json:"scale"` // durations × this (1: the reference's own)
	Setup     string   `json:"setup,omitempty"`
	Columns   []string `json:"columns"`
	Rows      [][]Cell `json:"rows"`
	Findings  []string `json:"findings,omitempty"` // the lint's, verbatim, for the bad configuration
	Chains    []string `json:"chains,omitempty"`   // the configurations compared
	Tolerance string   `json:"tolerance,omitempty"`
	Pass      bool     `json:"pass"`
	Unjudged  bool     `json:"unjudged,omitempty"` // measured only: no reference to judge against (Pass is then meaningless)
	Verdict   string   `json:"verdict"`
	Notes     []string `json:"notes,omitempty"` // where a measured value differs from the reference, why
	// Noise is the scheduling noise measured beside a real-time experiment
	// (nil: in virtual time, or not measured): its timing values are
	// judged against their tolerance plus this much lateness.
	Noise     *Noise     `json:"noise,omitempty"`
	Timelines []string   `json:"timelines,omitempty"` // the ids of its timelines, drawn beside it in the report
	checks    []checkRes // the comparisons behind the verdict
}

// Noise is how late a bare timer woke up while an experiment ran, sampled
// over and over beside it: the machine's scheduling noise. Times in real
// milliseconds; Allowance in the seed's (the lateness ÷ the scale).
type Noise struct {
	Period    float64 `json:"period_ms"` // the timer each sample waited for
	Samples   int     `json:"samples"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	Max       float64 `json:"max_ms"`
	Allowance float64 `json:"allowance_ms"` // how much later than its tolerance a timing value may be: Max ÷ the scale
}

// String says what the noise was, for a verdict.
func (n *Noise) String() string {
	return fmt.Sprintf("scheduling noise: a bare %s timer woke up to %s late (p99 %s, %s samples)",
		quantity(n.Period, "ms"), quantity(n.Max, "ms"), quantity(n.P99, "ms"), quantity(float64(n.Samples), ""))
}

// Cell is one value: measured, with its unit, and the seed's reference
// where there is one.
type Cell struct {
	Text      string   `json:"text"`
	Value     *float64 `json:"value,omitempty"`
	Unit      string   `json:"unit,omitempty"`
	Reference *float64 `json:"reference,omitempty"`
}

// checkRes is one comparison behind a verdict: a condition (expect), or a
// measured number and the range it must fall in, judged when the table is.
type checkRes struct {
	what   string
	ok     bool    // a condition's outcome (num false)
	num    bool    // a number: got within [lo, hi]
	got    float64 //
	lo, hi float64 // the range accepted, before any noise
	want   float64 // the seed's value (NaN: a range, no single value)
	tol    float64 // ± around want
	unit   string  // "ms" or "s" for times; else what is counted, or ""
	timing bool    // a real-time instant or latency: hi widened by the noise
	// A count of calls paced by a timer, one every interval (ms, in the
	// seed's time; 0: not paced): a late timer can move a call across each
	// of bounds instants where the calls' fate changes, so [lo, hi] is
	// widened both ways by bounds calls per interval (or part) of noise.
	interval float64
	bounds   int
}

func text(s string) Cell { return Cell{Text: s} }

// num is a measured number with a unit, and its reference (NaN: none),
// written with format ("%.0f": a whole number, its thousands separated).
func num(v float64, unit string, ref float64, format string) Cell {
	f := func(x float64) string {
		if format == "%.0f" {
			return quantity(x, "")
		}
		return fmt.Sprintf(format, x)
	}
	c := Cell{Text: f(v), Value: &v, Unit: unit}
	if !math.IsNaN(ref) {
		c.Reference = &ref
		c.Text += " (reference " + f(ref) + ")"
	}
	return c
}

var none = math.NaN()

// check records, for the table's verdict, a measured value got that must
// be within tol of the seed's want, in unit ("ms", "s", or what is
// counted). A count with tol 0 is exact: no noise widens it (checkPaced is
// for a count that timing decides).
func (t *Table) check(what string, got, want, tol float64, unit string) {
	t.checks = append(t.checks, checkRes{what: what, num: true, got: got, lo: want - tol, hi: want + tol, want: want, tol: tol, unit: unit})
}

// checkPaced is check for a count of calls paced by a timer, one every
// interval ms (in the seed's time), exact when the timer is on time: a late
// timer can move a call across each of bounds instants where the calls'
// fate changes (a breaker's open period ending), so the count is allowed
// bounds calls per interval, or part of one, of the noise measured beside
// it, either way.
func (t *Table) checkPaced(what string, got, want float64, unit string, interval float64, bounds int) {
	t.checks = append(t.checks, checkRes{what: what, num: true, got: got, lo: want, hi: want, want: want, unit: unit, interval: interval, bounds: bounds})
}

// checkTime is check for a time measured in real time ("ms" or "s", in the
// seed's time): it may also be later than want + tol by the scheduling
// noise measured beside it, never earlier than want − tol.
func (t *Table) checkTime(what string, got, want, tol float64, unit string) {
	t.checks = append(t.checks, checkRes{what: what, num: true, got: got, lo: want - tol, hi: want + tol, want: want, tol: tol, unit: unit, timing: true})
}

// between records a measured value that must be within [lo, hi] (either
// may be infinite); timing as in checkTime.
func (t *Table) between(what string, got, lo, hi float64, unit string, timing bool) {
	t.checks = append(t.checks, checkRes{what: what, num: true, got: got, lo: lo, hi: hi, want: none, unit: unit, timing: timing})
}

// expect records a condition the table's verdict rests on.
func (t *Table) expect(what string, ok bool) {
	t.checks = append(t.checks, checkRes{what: what, ok: ok})
}

// judge sets the verdict from the checks, timing values allowed the
// table's noise.
func (t *Table) judge() {
	var failed []string
	paced := 0.0 // the widest paced count's slack
	for _, c := range t.checks {
		a := t.allowance(c.unit)
		if c.interval > 0 {
			a = t.slack(c)
			paced = max(paced, a)
		}
		if !c.pass(a) {
			failed = append(failed, c.describe(a))
		}
	}
	t.Pass = len(failed) == 0
	if t.Pass {
		t.Verdict = fmt.Sprintf("reproduced: %d of %d values within tolerance", len(t.checks), len(t.checks))
	} else {
		t.Verdict = fmt.Sprintf("NOT reproduced: %d of %d values off: %s", len(failed), len(t.checks), strings.Join(failed, "; "))
	}
	if t.Noise == nil {
		return
	}
	t.Verdict += "; " + t.Noise.String()
	if slices.ContainsFunc(t.checks, func(c checkRes) bool { return c.timing }) {
		t.Verdict += ", and each time was allowed that much later"
		if t.Noise.Allowance != t.Noise.Max {
			t.Verdict += fmt.Sprintf(" (%s in the reference's time)", quantity(t.Noise.Allowance, "ms"))
		}
	}
	if paced > 0 {
		t.Verdict += fmt.Sprintf(", each count paced by a timer up to %s off", quantity(paced, "calls"))
	}
}

// slack is how many calls a paced count c may be off by: c.bounds calls
// per c.interval, or part of one, of the noise's lateness in the seed's time
// (0: no noise measured).
func (t *Table) slack(c checkRes) float64 {
	if t.Noise == nil || c.interval <= 0 || t.Noise.Allowance <= 0 {
		return 0
	}
	return float64(c.bounds) * math.Ceil(t.Noise.Allowance/c.interval)
}

// allowance is the noise's lateness in unit, in the seed's time (0: no
// noise, or not a time).
func (t *Table) allowance(unit string) float64 {
	if t.Noise == nil {
		return 0
	}
	switch unit {
	case "ms":
		return t.Noise.Allowance
	case "s":
		return t.Noise.Allowance / 1000
	}
	return 0
}

func (c checkRes) pass(noise float64) bool {
	if !c.num {
		return c.ok
	}
	lo, hi := c.lo, c.hi
	switch {
	case c.timing:
		hi += noise
	case c.interval > 0:
		lo, hi = lo-noise, hi+noise
	}
	return c.got >= lo && c.got <= hi
}

// describe is the check for a verdict that lists it: "what: 1,780 ms (seed
// 1,750 ms, ± 15 ms + 2.1 ms of noise)".
func (c checkRes) describe(noise float64) string {
	if !c.num {
		return c.what
	}
	var want string
	switch {
	case !math.IsNaN(c.want) && c.tol == 0:
		want = fmt.Sprintf("reference %s, exact", quantity(c.want, c.unit))
	case !math.IsNaN(c.want):
		want = fmt.Sprintf("reference %s, ± %s", quantity(c.want, c.unit), quantity(c.tol, c.unit))
	case math.IsInf(c.lo, -1):
		want = "at most " + quantity(c.hi, c.unit)
	case math.IsInf(c.hi, 1):
		want = "at least " + quantity(c.lo, c.unit)
	default:
		want = fmt.Sprintf("want %s to %s", quantity(c.lo, c.unit), quantity(c.hi, c.unit))
	}
	if c.interval > 0 && noise > 0 {
		want += fmt.Sprintf(" on time, ± %s of noise", quantity(noise, c.unit))
	}
	if c.timing && noise > 0 {
		// The noise in ms, whatever the unit: it is small.
		n := noise
		if c.unit == "s" {
			n *= 1000
		}
		want += fmt.Sprintf(" + %s of noise", quantity(n, "ms"))
	}
	return fmt.Sprintf("%s: %s (%s)", c.what, quantity(c.got, c.unit), want)
}

// quantity is v in unit, as a reader reads it: "1,780 ms", "702.6 ms",
// "15.06 s", "24,878 calls", "2.5".
func quantity(v float64, unit string) string {
	var s string
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		s = fmt.Sprint(v)
	case unit == "s" && math.Abs(v) < 1000:
		s = strconv.FormatFloat(v, 'f', 2, 64)
	case math.Abs(v) >= 1000 || v == math.Trunc(v):
		s = thousands(int64(math.Round(v)))
	case math.Abs(v) >= 10:
		s = strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0")
	case unit == "ms":
		s = strconv.FormatFloat(v, 'f', 1, 64)
		if s == "0.0" && v > 0 {
			s = strconv.FormatFloat(v, 'f', 2, 64)
		}
	default:
		s = strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
	}
	if unit == "" {
		return s
	}
	return s + " " + unit
}

// thousands is n with a comma between each group of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
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
		fmt.Fprintf(w, "(quick: durations × %g, reported in the reference's time, ÷ %g", t.Scale, t.Scale)
		if len(t.Chains) > 0 {
			fmt.Fprint(w, "; the configurations and the lint at the reference's durations")
		}
		fmt.Fprintln(w, ")")
	}
	for i, c := range t.Chains {
		fmt.Fprintf(w, "  configuration %d: %s\n", i+1, wrap(c, 100))
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
	fmt.Fprintf(w, "  verdict: %s\n", wrap(t.Verdict, 100))
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
	Refs     []TimelineRef  `json:"references,omitempty"` // the reference instants, drawn as ticks
	Caption  string         `json:"caption,omitempty"`    // what its counts are ("": N requests over the run)
}

// TimelineRef is one of the seed's reference instants: where a measured
// instant should be (A1's transitions, K1's latest open and close).
type TimelineRef struct {
	At    float64 `json:"at_s"`
	Label string  `json:"label"`          // a short name drawn beside the tick: "1", "open by"
	Note  string  `json:"note,omitempty"` // the reference's and the measured value, shown on hover
	Off   bool    `json:"off,omitempty"`  // the measured instant is outside the tolerance (and the noise)
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
