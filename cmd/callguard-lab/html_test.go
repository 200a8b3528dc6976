package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	xhtmlNS = "http://www.w3.org/1999/xhtml"
	svgNS   = "http://www.w3.org/2000/svg"
)

// htmlTestReport is a report built by hand: two tables, one passing and
// one failing, and two timelines, one of them dense. Titles carry markup
// that must come out as text.
func htmlTestReport() *Report {
	v, ref := 1.02, 1.025
	pass := &Table{ID: "A1", Title: "the breaker's transitions <b>bold?</b>", Proto: "http", Scale: 0.25,
		Setup:     "A call every 50 ms; the downstream fails in [500 ms, 2000 ms) & [4000 ms, 5500 ms).",
		Columns:   []string{"event", "reference", "native"},
		Rows:      [][]Cell{{text("closed → open"), text("0.75 s"), {Text: "1.02 s (reference 1.03 s)", Value: &v, Unit: "s", Reference: &ref}}, {text("short row")}},
		Chains:    []string{"breaker(5 consecutive) → retry(3)"},
		Tolerance: "± 50 ms",
		Pass:      true,
		Verdict:   "reproduced: 10 of 10 values within tolerance",
		Notes:     []string{"a note with \"quotes\" and 'apostrophes'"}}
	fail := &Table{ID: "C2", Title: `<script>alert("x")</script> timeout vs reaction`, Proto: "grpc", Scale: 1,
		Columns:   []string{"call timeout", "time to open"},
		Rows:      [][]Cell{{text("3 s"), text("15.0 s (reference 15.0 s)")}},
		Findings:  []string{"timeout(3s) inside breaker: detection takes 5 × 3s = 15s\n  fix: lower the timeout <200ms>"},
		Chains:    []string{"breaker → timeout(3s)", "breaker → timeout(200ms)"},
		Tolerance: "5 %",
		Pass:      false,
		Verdict:   "NOT reproduced: 1 of 4 values off: 3 s, 20 callers: time to open: 16 (reference 15, ± 0.75)"}

	sparse := &Timeline{ID: "A1-http-native", Title: "A1 over http, native engine", Duration: 8,
		States: []StateSpan{{0, 0.75, "closed"}, {0.75, 1.775, "open"}, {1.775, 1.776, "half-open"}, {1.776, 2.8, "open"},
			{2.8, 2.95, "half-open"}, {2.95, 8, "closed"}},
		Faults: [][2]float64{{0.5, 2}, {4, 5.5}},
		Refs: []TimelineRef{{At: 0.7, Label: "1", Note: "1 closed → open: the reference's 700 ms, measured 750 ms"},
			{At: 1.75, Label: "2", Note: "2 open → half-open"}, {At: 1.75, Label: "3", Note: "3 half-open → open", Off: true}}}
	for i := range 160 {
		at := float64(i) * 0.05
		kind := "ok"
		switch {
		case at >= 0.75 && at < 1.775 || at >= 1.776 && at < 2.8:
			kind = "rejected"
		case at >= 0.5 && at < 2:
			kind = "failure"
		}
		sparse.Marks = append(sparse.Marks, TimelineMark{At: at, Kind: kind})
	}
	dense := &Timeline{ID: "C4-grpc-50ms", Title: "C4 over grpc, timeout 50ms </title><script>alert(1)</script>", Duration: 20,
		States: []StateSpan{{0, 20, "closed"}}}
	kinds := []string{"ok", "ok", "ok", "timeout", "failure"}
	for i := range 6000 {
		dense.Marks = append(dense.Marks, TimelineMark{At: float64(i) * 20 / 6000, Kind: kinds[i%len(kinds)]})
	}
	return &Report{Mode: "quick", Proto: "both", Started: time.Date(2025, 3, 1, 12, 30, 0, 0, time.UTC), Elapsed: 97.4,
		Tables: []*Table{pass, fail}, Timelines: []*Timeline{sparse, dense}}
}

// xmlElem is an element of the page as encoding/xml saw it.
type xmlElem struct {
	name    xml.Name
	attrs   map[string]string
	text    string // all character data inside it
	parents []xml.Name
}

// parseXHTML walks every token of the page, strictly, as XML, and returns
// every element with its text.
func parseXHTML(t *testing.T, page string) []*xmlElem {
	t.Helper()
	const doctype = "<!DOCTYPE html>\n"
	if !strings.HasPrefix(page, doctype) {
		t.Fatalf("the page does not start with %q: %.60q", doctype, page)
	}
	d := xml.NewDecoder(strings.NewReader(strings.TrimPrefix(page, doctype)))
	d.Strict = true
	var all, open []*xmlElem
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			line, col := d.InputPos()
			t.Fatalf("not well-formed XML at line %d, column %d: %v", line, col, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := &xmlElem{name: tok.Name, attrs: map[string]string{}}
			for _, p := range open {
				e.parents = append(e.parents, p.name)
			}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			all, open = append(all, e), append(open, e)
		case xml.EndElement:
			open = open[:len(open)-1]
		case xml.CharData:
			for _, e := range open {
				e.text += string(tok)
			}
		}
	}
	if len(all) == 0 || all[0].name != (xml.Name{Space: xhtmlNS, Local: "html"}) {
		t.Fatalf("the root element is not an XHTML html")
	}
	return all
}

func TestHTMLReport(t *testing.T) {
	r := htmlTestReport()
	dir := filepath.Join(t.TempDir(), "out") // writeHTML makes it
	if err := writeHTML(dir, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if out := os.Getenv("CALLGUARD_LAB_HTML_OUT"); out != "" { // to look at it
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	elems := parseXHTML(t, page)

	var body string
	for _, e := range elems {
		if e.name.Local == "body" {
			body = e.text
		}
	}
	for _, want := range []string{"quick", "HTTP and gRPC", "2025-03-01 12:30:00 UTC", "1 min 37 s"} {
		if !strings.Contains(body, want) {
			t.Errorf("the run's header does not show %q", want)
		}
	}

	// Every table: its id, title, protocol, setup, configurations,
	// findings verbatim, cells, notes, tolerance, and its verdict in the
	// right colour.
	for _, tb := range r.Tables {
		var sec *xmlElem
		for _, e := range elems {
			if e.name.Local == "section" && strings.Contains(e.text, tb.ID+" "+tb.Title) {
				sec = e
			}
		}
		if sec == nil {
			t.Errorf("%s: no section with its id and title %q", tb.ID, tb.Title)
			continue
		}
		wants := []string{tb.ID, protoName(tb.Proto), tb.Setup, tb.Tolerance, tb.Verdict}
		if tb.Scale != 1 {
			wants = append(wants, fmt.Sprintf("durations × %g, reported in the reference's time", tb.Scale))
		}
		wants = append(append(append(wants, tb.Chains...), tb.Notes...), tb.Columns...)
		for _, row := range tb.Rows {
			for _, c := range row {
				wants = append(wants, c.Text)
			}
		}
		for _, w := range wants {
			if !strings.Contains(sec.text, w) {
				t.Errorf("%s: the section does not show %q", tb.ID, w)
			}
		}
		for _, f := range tb.Findings {
			found := false
			for _, e := range elems {
				found = found || e.name.Local == "pre" && e.text == f
			}
			if !found {
				t.Errorf("%s: the finding %q is not in a <pre> verbatim", tb.ID, f)
			}
		}
		class := "fail"
		if tb.Pass {
			class = "pass"
		}
		found := false
		for _, e := range elems {
			found = found || e.name.Local == "p" && strings.Contains(e.text, tb.Verdict) &&
				strings.Contains(" "+e.attrs["class"]+" ", " verdict ") && strings.Contains(" "+e.attrs["class"]+" ", " "+class+" ")
		}
		if !found {
			t.Errorf("%s: the verdict %q is not shown with class %q", tb.ID, tb.Verdict, class)
		}
	}
	if !strings.Contains(page, ".pass { color: #1b5e20; }") || !strings.Contains(page, ".fail { color: #b71c1c; }") {
		t.Error("the stylesheet does not colour pass green and fail red")
	}

	// One SVG per timeline, in the SVG namespace, with a <title> naming
	// it and a caption; the dense one's marks binned.
	var svgs []*xmlElem
	for _, e := range elems {
		if e.name.Local == "svg" {
			svgs = append(svgs, e)
			if e.name.Space != svgNS {
				t.Errorf("an <svg> in namespace %q", e.name.Space)
			}
		}
	}
	if len(svgs) != len(r.Timelines) {
		t.Fatalf("%d <svg> for %d timelines", len(svgs), len(r.Timelines))
	}
	for i, tl := range r.Timelines {
		var title, caption string
		for _, e := range elems {
			inside := len(e.parents) > 0 && e.parents[len(e.parents)-1].Local == "svg"
			switch {
			case e.name.Local == "title" && inside && e.attrs["id"] == fmt.Sprintf("timeline-%d-title", i+1):
				title = e.text
			case e.name.Local == "figcaption" && strings.HasPrefix(e.text, tl.Title+" — "):
				caption = e.text
			}
		}
		if title != tl.Title || caption == "" {
			t.Errorf("timeline %s: svg title %q, caption %q: want both to be its title %q (once)", tl.ID, title, caption, tl.Title)
		}
	}
	// Count the mark rects per picture: at most one per pixel column per
	// kind, however many marks.
	for i, tl := range r.Timelines {
		lo := strings.Index(page, fmt.Sprintf(`<figure id="timeline-%d"`, i+1))
		hi := lo + strings.Index(page[lo:], "</figure>")
		if lo < 0 || hi < lo {
			t.Fatalf("timeline %s: no figure", tl.ID)
		}
		n := strings.Count(page[lo:hi], "fill-opacity=")
		if n == 0 || n > 4*plotWidth {
			t.Errorf("timeline %s: %d mark rects for %d marks", tl.ID, n, len(tl.Marks))
		}
		for _, c := range []string{stateColors["closed"], markColors["ok"]} {
			if !strings.Contains(page[lo:hi], c) {
				t.Errorf("timeline %s: no %s drawn", tl.ID, c)
			}
		}
		if tl.Faults != nil && !strings.Contains(page[lo:hi], "downstream failing, 0.500 s to 2.000 s") {
			t.Errorf("timeline %s: the fault windows are not drawn", tl.ID)
		}
		t.Logf("timeline %s: %d marks drawn as %d rects", tl.ID, len(tl.Marks), n)
	}

	// Self-contained, and the markup in titles is text.
	if strings.Contains(strings.ToLower(page), "<script") {
		t.Error("the page holds a <script> tag: a title was not escaped")
	}
	for _, s := range []string{"<link", "src=", "@import", "url(http"} {
		if strings.Contains(page, s) {
			t.Errorf("the page is not self-contained: it holds %q", s)
		}
	}
	rest := strings.NewReplacer(xhtmlNS, "", svgNS, "").Replace(page)
	if strings.Contains(rest, "http://") || strings.Contains(rest, "https://") {
		t.Error("the page refers to an address other than its namespaces")
	}
	if !strings.Contains(page, "&lt;script&gt;") {
		t.Error("the <script> title is not in the page, escaped")
	}
	if !strings.Contains(body, `<script>alert("x")</script> timeout vs reaction`) {
		t.Error("the escaped title does not read back as the title")
	}
}

func TestHTMLEmptyReport(t *testing.T) {
	dir := t.TempDir()
	if err := writeHTML(dir, &Report{Timelines: []*Timeline{{ID: "empty", Title: "nothing"}}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	parseXHTML(t, string(b))
	if err := writeHTML(dir, nil); err == nil {
		t.Error("writeHTML(nil): no error")
	}
}

// TestHTMLTimelinesBesideTables: a timeline is drawn right after the table
// it belongs to, with the seed's reference instants, its half-open stays
// wide enough to see, and a caption whose counts say what they count.
func TestHTMLTimelinesBesideTables(t *testing.T) {
	r := htmlTestReport()
	k1 := &Table{ID: "K1", Title: "kill -9", Proto: "http", Scale: 1, Columns: []string{"what"}, Rows: [][]Cell{{text("opened")}},
		Pass: true, Verdict: "reproduced", Timelines: []string{"K1-run"}}
	r.Tables = append(r.Tables, k1)
	r.Timelines = append(r.Timelines, &Timeline{ID: "K1-run", Title: "K1 over HTTP: killed at 1s", Duration: 4,
		States: []StateSpan{{0, 4, "closed"}}, Marks: []TimelineMark{{At: 1, Kind: "ok", N: 12345}}, Caption: "12,345 calls made."})
	dir := t.TempDir()
	if err := writeHTML(dir, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	elems := parseXHTML(t, page)

	// Where each figure is: A1's (claimed by its id's prefix) inside the
	// first section, after its table; K1's (named by the table) in the
	// third; the dense one, no table's, after the last section.
	at := func(s string) int {
		i := strings.Index(page, s)
		if i < 0 {
			t.Fatalf("the page has no %q", s)
		}
		return i
	}
	sections := []int{at(`id="table-1"`), at(`id="table-2"`), at(`id="table-3"`)}
	for _, c := range []struct {
		figure string
		after  int // the section it must be in, after its table
	}{{`<figure id="timeline-1"`, 0}, {`<figure id="timeline-3"`, 2}} {
		f := at(c.figure)
		start := sections[c.after]
		end := start + strings.Index(page[start:], "</section>")
		tableEnd := start + strings.Index(page[start:], "</table>")
		if f < tableEnd || f > end {
			t.Errorf("%s at %d: want it in section %d, after its table (%d to %d)", c.figure, f, c.after+1, tableEnd, end)
		}
	}
	if f, h := at(`<figure id="timeline-2"`), at("<h2>Timelines</h2>"); f < h || h < sections[2] {
		t.Errorf("the timeline no table claims is at %d, the Timelines heading at %d: want both after the last table (%d)", f, h, sections[2])
	}

	var halfOpen *xmlElem
	var refLabels, refNotes []string
	red := map[string]bool{}
	captions := map[string]string{}
	for _, e := range elems {
		switch {
		case e.name.Local == "rect" && strings.HasPrefix(e.text, "half-open, 1.775 s to 1.776 s"):
			halfOpen = e
		case e.name.Local == "text" && e.attrs["font-size"] == "13":
			refLabels = append(refLabels, e.text)
			red[e.text] = e.attrs["fill"] == "#b71c1c"
		case e.name.Local == "g":
			refNotes = append(refNotes, e.text)
		case e.name.Local == "figcaption":
			captions[e.text] = e.text
		}
	}
	// A 1 ms half-open stay is 0.1 units wide at its true width.
	if halfOpen == nil {
		t.Fatal("no half-open rect for the 1.775 s stay")
	}
	if w, _ := strconv.ParseFloat(halfOpen.attrs["width"], 64); w < minHalf || halfOpen.attrs["stroke"] == "" {
		t.Errorf("the 1 ms half-open stay is drawn %v wide, stroke %q: want at least %d, outlined", w, halfOpen.attrs["stroke"], minHalf)
	}
	// The references: 2 and 3 fall on one column, 3 missed.
	if !slices.Equal(refLabels, []string{"1", "2,3"}) || red["1"] || !red["2,3"] {
		t.Errorf("reference labels %q (red: %v): want 1 and 2,3, only 2,3 red", refLabels, red)
	}
	if len(refNotes) != 2 || !strings.Contains(refNotes[0], "measured 750 ms") || !strings.Contains(refNotes[1], "3 half-open → open") {
		t.Errorf("reference notes %q: want the reference's and the measured instant on hover", refNotes)
	}
	for _, want := range []string{
		"A1 over http, native engine — 160 requests over 8 s.",
		"K1 over HTTP: killed at 1s — 12,345 calls made.",
		"C4 over grpc, timeout 50ms </title><script>alert(1)</script> — 6,000 requests over 20 s.",
	} {
		if captions[want] == "" {
			t.Errorf("no caption %q; captions: %q", want, slices.Collect(maps.Keys(captions)))
		}
	}
	if !strings.Contains(page, ">ok (12,345)<") {
		t.Error("the row of ok marks is not labelled with its count, 12,345")
	}
	for _, legend := range []string{"half-open (outlined, widened if short)", "reference instant", "missed (outside tolerance + noise)"} {
		if !slices.ContainsFunc(elems, func(e *xmlElem) bool { return e.name.Local == "text" && e.text == legend }) {
			t.Errorf("the legend does not say %q", legend)
		}
	}
}
