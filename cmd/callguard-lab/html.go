package main

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// writeHTML writes the report to dir/index.html: one self-contained page
// (inline CSS and SVG, nothing fetched) with the run's header, every table
// with its setup, configurations, lint findings, notes and verdict, and a
// picture of every timeline, right after the table it belongs to (a
// timeline no table claims comes at the page's end).
//
// The page is XHTML-compatible markup served as HTML: every element is
// closed, every attribute quoted, and only numeric character references
// are used, so it parses as XML once its DOCTYPE line is removed.
func writeHTML(dir string, r *Report) error {
	if r == nil {
		return errors.New("--report: no report")
	}
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, newPage(r)); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.html"), b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	return nil
}

// page is what the template shows: the report, already turned into text
// and SVG geometry.
type page struct {
	Mode, Proto        string
	Started, StartedTS string
	Elapsed            string
	Passed, Failed     int
	Measured           int    // tables with no reference to judge against
	Clock              string // whose time the pictures are in
	Tables             []htmlTable
	Pictures           bool          // some timeline is drawn
	Columns            int           // the pixel columns a timeline's marks are binned into
	Timelines          []svgTimeline // the timelines no table claims
}

type htmlTable struct {
	Anchor      string
	ID, Title   string
	Proto       string
	Scale       string
	Setup       string
	Chains      []string
	Findings    []string
	Columns     []string
	Rows        [][]string
	Notes       []string
	Tolerance   string
	Pass        bool
	Class       string // pass, fail or info (measured, not judged)
	Verdict     string
	VerdictWord string
	Figures     []svgTimeline // its timelines, drawn after it
}

func newPage(r *Report) page {
	p := page{Columns: plotWidth, Mode: r.Mode, Proto: protoName(r.Proto), Started: "unknown", Elapsed: fmtElapsed(r.Elapsed), Clock: "the reference's time"}
	if r.Clock != "" {
		p.Clock = r.Clock
	}
	if p.Mode == "" {
		p.Mode = "unknown"
	}
	if !r.Started.IsZero() {
		p.Started = r.Started.Format("2006-01-02 15:04:05 MST")
		p.StartedTS = r.Started.Format(time.RFC3339)
	}
	laid := make([]*svgTimeline, len(r.Timelines))
	for i, tl := range r.Timelines {
		if tl != nil {
			v := layoutTimeline(i+1, tl)
			v.Clock = p.Clock
			laid[i] = &v
			p.Pictures = true
		}
	}
	for i, t := range r.Tables {
		if t == nil {
			continue
		}
		ht := htmlTable{Anchor: fmt.Sprintf("table-%d", i+1), ID: t.ID, Title: t.Title, Proto: protoName(t.Proto),
			Setup: t.Setup, Chains: t.Chains, Findings: t.Findings, Columns: t.Columns, Notes: t.Notes,
			Tolerance: t.Tolerance, Pass: t.Pass, Verdict: t.Verdict, VerdictWord: "FAIL"}
		switch {
		case t.Scale == 1:
			ht.Scale = "the reference's own durations"
		case t.Scale > 0:
			ht.Scale = fmt.Sprintf("durations × %g, reported in the reference's time", t.Scale)
			if len(t.Chains) > 0 {
				ht.Scale += "; the configurations and the lint at the reference's durations"
			}
		}
		switch {
		case t.Unjudged:
			ht.VerdictWord, ht.Class, p.Measured = "MEASURED", "info", p.Measured+1
		case t.Pass:
			ht.VerdictWord, ht.Class, p.Passed = "PASS", "pass", p.Passed+1
		default:
			ht.Class = "fail"
			p.Failed++
		}
		for _, row := range t.Rows {
			cells := make([]string, max(len(row), len(t.Columns)))
			for j, c := range row {
				cells[j] = c.Text
			}
			ht.Rows = append(ht.Rows, cells)
		}
		// Its timelines: those it names; a table that names none (a
		// what-if scenario's) those whose id is its own or starts with it
		// and a dash.
		for j, tl := range r.Timelines {
			if laid[j] == nil { // none, or another table's
				continue
			}
			mine := slices.Contains(t.Timelines, tl.ID)
			if len(t.Timelines) == 0 {
				mine = tl.ID == t.ID || strings.HasPrefix(tl.ID, t.ID+"-")
			}
			if mine {
				ht.Figures = append(ht.Figures, *laid[j])
				laid[j] = nil
			}
		}
		p.Tables = append(p.Tables, ht)
	}
	for _, v := range laid {
		if v != nil {
			p.Timelines = append(p.Timelines, *v)
		}
	}
	return p
}

func protoName(p string) string {
	switch p {
	case "":
		return "—"
	case "http":
		return "HTTP"
	case "grpc":
		return "gRPC"
	case "both":
		return "HTTP and gRPC"
	}
	return p
}

func fmtElapsed(s float64) string {
	switch {
	case math.IsNaN(s) || s < 0:
		return "unknown"
	case s < 60:
		return fmt.Sprintf("%.1f s", s)
	}
	n := int(math.Round(s))
	return fmt.Sprintf("%d min %02d s", n/60, n%60)
}

var pageTemplate = template.Must(template.New("index.html").Parse(`<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" lang="en">
<head>
<meta charset="utf-8"/>
<meta name="viewport" content="width=device-width, initial-scale=1"/>
<title>callguard lab: {{.Mode}} run, {{.Proto}}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #212121; margin: 2em auto; max-width: 1060px; padding: 0 1em; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.3em; border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2.2em; }
h3 { font-size: 1.1em; margin-bottom: 0.3em; }
dl.run { display: grid; grid-template-columns: max-content auto; gap: 0.1em 1em; }
dl.run dt { font-weight: 600; }
dl.run dd { margin: 0; }
ul.summary { list-style: none; padding: 0; columns: 2; }
ul.summary li { margin: 0.15em 0; }
section.table { border: 1px solid #ddd; border-radius: 6px; padding: 0.4em 1.2em 1em; margin: 1.4em 0; }
section.table-fail { border-color: #e57373; }
.meta { color: #555; font-size: 0.95em; }
.meta span { margin-right: 1.5em; }
.label { font-weight: 600; }
div.scroll { overflow-x: auto; }
table.results { border-collapse: collapse; margin: 0.8em 0; font-variant-numeric: tabular-nums; }
table.results th, table.results td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
table.results th { background: #f3f3f3; }
table.results tbody tr:nth-child(even) { background: #fafafa; }
pre.lint { background: #fff8e1; border-left: 4px solid #ffb300; padding: 0.5em 0.8em; white-space: pre-wrap; overflow-wrap: anywhere; margin: 0.3em 0; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.92em; }
.verdict { font-weight: 600; padding: 0.4em 0.7em; border-radius: 4px; }
.pass { color: #1b5e20; }
.fail { color: #b71c1c; }
p.verdict.pass { background: #e8f5e9; }
p.verdict.fail { background: #ffebee; }
.badge { display: inline-block; min-width: 3em; text-align: center; font-weight: 700; font-size: 0.85em; border-radius: 3px; color: #fff; padding: 0 0.3em; margin-right: 0.4em; }
.badge.pass { background: #2e7d32; }
.badge.fail { background: #c62828; }
.badge.info { background: #455a64; }
p.verdict.info { background: #eceff1; }
figure { margin: 1em 0 1.2em; }
figure svg { width: 100%; max-width: 1000px; height: auto; display: block; border: 1px solid #eee; }
figcaption { color: #333; margin-top: 0.3em; font-size: 0.95em; }
.howto { color: #555; font-size: 0.95em; }
</style>
</head>
<body>
<h1>callguard lab</h1>
<dl class="run">
<dt>mode</dt><dd>{{.Mode}}</dd>
<dt>protocol</dt><dd>{{.Proto}}</dd>
<dt>started</dt><dd>{{if .StartedTS}}<time datetime="{{.StartedTS}}">{{.Started}}</time>{{else}}{{.Started}}{{end}}</dd>
<dt>duration</dt><dd>{{.Elapsed}}</dd>
<dt>tables</dt><dd>{{len .Tables}}: {{if .Measured}}{{.Measured}} measured, with no reference to judge against{{if or .Passed .Failed}}; {{end}}{{end}}{{if or .Passed .Failed (not .Measured)}}<span class="pass">{{.Passed}} reproduced</span>, <span class="{{if .Failed}}fail{{else}}pass{{end}}">{{.Failed}} not</span>{{end}}</dd>
</dl>
{{if .Tables}}<ul class="summary">
{{range .Tables}}<li><span class="badge {{.Class}}">{{.VerdictWord}}</span><a href="#{{.Anchor}}">{{.ID}}</a> {{.Title}}{{if ne .Proto "—"}} ({{.Proto}}){{end}}</li>
{{end}}</ul>
{{end}}
<h2>Tables</h2>
{{if .Pictures}}<p class="howto">{{template "howto" .}}</p>
{{end}}{{range .Tables}}<section class="table table-{{.Class}}" id="{{.Anchor}}">
<h3>{{.ID}} {{.Title}}</h3>
<p class="meta"><span><span class="label">id</span> {{.ID}}</span><span><span class="label">protocol</span> {{.Proto}}</span>{{if .Scale}}<span><span class="label">scale</span> {{.Scale}}</span>{{end}}</p>
{{if .Setup}}<p><span class="label">Setup.</span> {{.Setup}}</p>
{{end}}{{if .Chains}}<p class="label">Configurations compared</p>
<ol>
{{range .Chains}}<li><code>{{.}}</code></li>
{{end}}</ol>
{{end}}{{if .Findings}}<p class="label">Lint findings for the bad configuration</p>
{{range .Findings}}<pre class="lint">{{.}}</pre>
{{end}}{{end}}<div class="scroll"><table class="results">
<thead><tr>{{range .Columns}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody>
</table></div>
{{range .Figures}}{{template "figure" .}}{{end}}{{if .Notes}}<p class="label">Notes</p>
<ul>
{{range .Notes}}<li>{{.}}</li>
{{end}}</ul>
{{end}}{{if .Tolerance}}<p><span class="label">Tolerance:</span> {{.Tolerance}}</p>
{{end}}<p class="verdict {{.Class}}"><span class="badge {{.Class}}">{{.VerdictWord}}</span>{{.Verdict}}</p>
</section>
{{else}}<p>No tables.</p>
{{end}}
{{if .Timelines}}<h2>Timelines</h2>
{{range .Timelines}}{{template "figure" .}}{{end}}{{end}}</body>
</html>
{{define "howto"}}How to read a timeline: the top band is the breaker's state (half-open outlined, and drawn at least a few pixels wide: a probe round lasts milliseconds); ticks above it mark the reference instants (SEEDS A and C), red where the run missed one (outside the tolerance plus the measured scheduling noise). Hatched: the downstream's fault windows. Rows: each request's outcome at the time it ended, binned per pixel column ({{.Columns}} columns over the run); the darker a column, the more requests in it (1, 2–3, 4 or more). Times are in seconds, in {{.Clock}}.{{end}}
{{define "figure"}}{{$tl := .}}<figure id="{{.Anchor}}">
<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" viewBox="{{.ViewBox}}" role="img" aria-labelledby="{{.Anchor}}-title" font-family="sans-serif" font-size="15">
<title id="{{.Anchor}}-title">{{.Title}}</title>
<defs>
<pattern id="{{.PatternID}}" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
<rect width="6" height="6" fill="#f2f2f2"/>
<line x1="0" y1="0" x2="0" y2="6" stroke="#c4c4c4" stroke-width="2.5"/>
</pattern>
</defs>
<rect x="0" y="0" width="{{.Width}}" height="{{.Height}}" fill="#ffffff"/>
{{$pid := .PatternID}}{{range .Faults}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="url(#{{$pid}})"><title>{{.Label}}</title></rect>
{{end}}{{range .Ticks}}<line x1="{{.X}}" y1="{{$tl.BandY}}" x2="{{.X}}" y2="{{$tl.AxisY}}" stroke="#000000" stroke-opacity="0.08"/>
{{end}}<text x="{{.PlotLeft}}" dx="-8" y="{{.BandY}}" dy="17" text-anchor="end" font-weight="bold">breaker</text>
{{range .States}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="{{.Fill}}"><title>{{.Label}}</title></rect>
{{end}}{{range .HalfOpens}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="{{.Fill}}" stroke="#5d4037" stroke-width="1"><title>{{.Label}}</title></rect>
{{end}}{{range .Refs}}<g><title>{{.Note}}</title><line x1="{{.X}}" y1="{{.Y1}}" x2="{{.X}}" y2="{{.Y2}}" stroke="{{.Color}}" stroke-width="1.2" stroke-dasharray="3 2"/><text x="{{.X}}" y="{{.LabelY}}" text-anchor="middle" font-size="13" fill="{{.Color}}" font-weight="{{.Weight}}">{{.Label}}</text></g>
{{end}}{{range .Rows}}<text x="{{$tl.PlotLeft}}" dx="-8" y="{{.LabelY}}" text-anchor="end">{{.Label}} ({{.CountText}})</text>
<line x1="{{$tl.PlotLeft}}" y1="{{.BaselineY}}" x2="{{$tl.PlotRight}}" y2="{{.BaselineY}}" stroke="#bdbdbd" stroke-width="0.5"/>
{{$c := .Color}}{{range .Marks}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="{{$c}}" fill-opacity="{{.Opacity}}"/>
{{end}}{{end}}<line x1="{{.PlotLeft}}" y1="{{.AxisY}}" x2="{{.PlotRight}}" y2="{{.AxisY}}" stroke="#424242"/>
{{range .Ticks}}<line x1="{{.X}}" y1="{{$tl.AxisY}}" x2="{{.X}}" y2="{{$tl.TickEnd}}" stroke="#424242"/><text x="{{.X}}" y="{{$tl.AxisY}}" dy="18" text-anchor="middle">{{.Label}}</text>
{{end}}<text x="{{.AxisTitleX}}" y="{{.AxisTitleY}}" text-anchor="end" fill="#555555">seconds ({{.Clock}})</text>
{{range .Legend}}{{if eq .Kind "hatch"}}<rect x="{{.X}}" y="{{.SwatchY}}" width="14" height="13" fill="url(#{{$pid}})" stroke="#bdbdbd" stroke-width="0.5"/>{{else if eq .Kind "tick"}}<line x1="{{.TickX}}" y1="{{.TickY1}}" x2="{{.TickX}}" y2="{{.TickY2}}" stroke="{{.Fill}}" stroke-width="1.2" stroke-dasharray="3 2"/>{{else if eq .Kind "half-open"}}<rect x="{{.X}}" y="{{.SwatchY}}" width="14" height="12" fill="{{.Fill}}" stroke="#5d4037" stroke-width="1"/>{{else}}<rect x="{{.X}}" y="{{.SwatchY}}" width="14" height="12" fill="{{.Fill}}"/>{{end}}<text x="{{.TextX}}" y="{{.Y}}">{{.Label}}</text>
{{end}}</svg>
<figcaption><strong>{{.Title}}</strong> — {{.Caption}}</figcaption>
</figure>
{{end}}`))
