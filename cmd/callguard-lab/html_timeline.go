package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// The timeline picture's geometry, in SVG user units: one unit is one
// pixel column of the plot at the picture's natural width.
const (
	svgWidth   = 1000
	plotLeft   = 155
	plotWidth  = 830 // pixel columns the marks are binned into
	plotTop    = 10
	bandHeight = 24 // the breaker's state
	rowGap     = 6
	rowHeight  = 18 // one row of marks per kind
	refRow     = 16 // a row of reference labels above the band
	minHalf    = 5  // the narrowest a half-open stay is drawn: a probe round lasts milliseconds
)

var (
	stateColors = map[string]string{"closed": "#43a047", "open": "#e53935", "half-open": "#ffb300"}
	stateOrder  = []string{"closed", "open", "half-open"}
	markColors  = map[string]string{"ok": "#2e7d32", "failure": "#c62828", "rejected": "#5e35b1", "timeout": "#ef6c00"}
	markOrder   = []string{"ok", "failure", "rejected", "timeout"}
	otherColor  = "#757575"
)

// svgTimeline is a timeline laid out: every number already a coordinate.
type svgTimeline struct {
	Anchor, PatternID string
	ID, Title         string
	Duration          string
	Width, Height     int
	ViewBox           string
	PlotLeft, PlotTop string
	PlotRight         string
	BandY, BandH      string
	AxisY, TickEnd    string
	AxisTitleX        string
	AxisTitleY        string
	States            []svgRect
	HalfOpens         []svgRect // drawn over the other states, at least minHalf wide, outlined
	Refs              []svgRef
	Faults            []svgRect
	Rows              []svgRow
	Ticks             []svgTick
	Legend            []svgLegend
	MarkCount         int
	DrawnMarks        int    // the rects the marks became
	Caption           string // what it shows, in numbers
	Clock             string // whose time it is in
}

type svgRect struct {
	X, Y, W, H string
	Fill       string
	Opacity    string
	Label      string
}

type svgRow struct {
	Label     string
	LabelY    string
	Y, H      string
	Color     string
	Count     int
	CountText string // Count, as the caption writes numbers
	Marks     []svgRect
	BaselineY string
}

type svgTick struct {
	X, Label string
}

// svgRef is a reference instant: a tick through the band, its label above.
type svgRef struct {
	X, Y1, Y2 string
	LabelY    string
	Label     string
	Note      string
	Color     string
	Weight    string // the label's font weight
}

type svgLegend struct {
	X, Y, SwatchY string
	TextX         string
	Fill          string
	Kind          string // "" (a swatch of Fill), "hatch", "tick", "half-open"
	Label         string
	TickX         string
	TickY1        string
	TickY2        string
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// layoutTimeline lays a timeline out. Marks are binned per pixel column:
// each kind's row gets a 1-unit-wide rect in every column that holds at
// least one of its marks, darker the more marks it holds, and neighbouring
// columns of the same darkness are merged into one rect, so a picture has
// at most plotWidth rects per row however many requests it shows.
func layoutTimeline(n int, tl *Timeline) svgTimeline {
	dur := tl.Duration
	if !(dur > 0) || math.IsInf(dur, 0) {
		dur = 0
		for _, s := range tl.States {
			dur = math.Max(dur, s.To)
		}
		for _, f := range tl.Faults {
			dur = math.Max(dur, f[1])
		}
		for _, m := range tl.Marks {
			dur = math.Max(dur, m.At)
		}
		if !(dur > 0) || math.IsInf(dur, 0) {
			dur = 1
		}
	}
	xOf := func(t float64) float64 {
		if math.IsNaN(t) {
			t = 0
		}
		return plotLeft + math.Min(math.Max(t/dur, 0), 1)*plotWidth
	}

	// The rows of marks: the four known kinds, then any other, in order of
	// first appearance.
	kinds := append([]string(nil), markOrder...)
	counts := map[string][]int{}
	for _, k := range kinds {
		counts[k] = make([]int, plotWidth)
	}
	for _, m := range tl.Marks {
		c, ok := counts[m.Kind]
		if !ok {
			c = make([]int, plotWidth)
			counts[m.Kind] = c
			kinds = append(kinds, m.Kind)
		}
		at := m.At
		if math.IsNaN(at) {
			at = 0
		}
		col := int(math.Floor(at / dur * plotWidth))
		c[min(max(col, 0), plotWidth-1)] += m.count()
	}

	refs, refRows := layoutRefs(tl.Refs, xOf)
	bandY := float64(plotTop) + float64(refRows)*refRow
	rowsTop := bandY + bandHeight + rowGap
	rowsBottom := rowsTop + float64(len(kinds))*(rowHeight+rowGap)
	axisY := rowsBottom
	v := svgTimeline{
		Anchor: fmt.Sprintf("timeline-%d", n), PatternID: fmt.Sprintf("fault-hatch-%d", n),
		ID: tl.ID, Title: tl.Title, Duration: fmt.Sprintf("%g s", dur),
		PlotLeft: f1(plotLeft), PlotTop: f1(plotTop), PlotRight: f1(plotLeft + plotWidth),
		BandY: f1(bandY), BandH: f1(bandHeight),
		AxisY: f1(axisY), TickEnd: f1(axisY + 5), AxisTitleX: f1(plotLeft + plotWidth), AxisTitleY: f1(axisY + 36),
	}
	for _, m := range tl.Marks {
		v.MarkCount += m.count()
	}
	for _, r := range refs {
		color, weight := "#212121", "normal"
		if r.off {
			color, weight = "#b71c1c", "bold"
		}
		labelY := bandY - 3 - float64(r.row-1)*refRow
		v.Refs = append(v.Refs, svgRef{X: f1(r.x), Y1: f1(labelY + 2), Y2: f1(bandY + bandHeight + 3),
			LabelY: f1(labelY), Label: r.label, Note: r.note, Color: color, Weight: weight})
	}

	for _, s := range tl.States {
		x0, x1 := xOf(s.From), xOf(s.To)
		if x1 < x0 {
			x0, x1 = x1, x0
		}
		color, ok := stateColors[s.State]
		if !ok {
			color = otherColor
		}
		r := svgRect{X: f1(x0), Y: f1(bandY), W: f1(math.Max(x1-x0, 1)), H: f1(bandHeight),
			Fill: color, Label: fmt.Sprintf("%s, %.3f s to %.3f s (%s)", s.State, s.From, s.To, quantity((s.To-s.From)*1000, "ms"))}
		if s.State == "half-open" {
			// A probe round lasts milliseconds: drawn at least minHalf wide
			// (into what follows, within the plot), over the other states.
			w := math.Max(x1-x0, minHalf)
			r.X, r.W = f1(math.Min(x0, plotLeft+plotWidth-w)), f1(w)
			v.HalfOpens = append(v.HalfOpens, r)
			continue
		}
		// A span shorter than a pixel column still shows, one column wide.
		v.States = append(v.States, r)
	}
	for _, f := range tl.Faults {
		x0, x1 := xOf(f[0]), xOf(f[1])
		if x1 < x0 {
			x0, x1 = x1, x0
		}
		v.Faults = append(v.Faults, svgRect{X: f1(x0), Y: f1(bandY), W: f1(math.Max(x1-x0, 1)), H: f1(axisY - bandY),
			Label: fmt.Sprintf("downstream failing, %.3f s to %.3f s", f[0], f[1])})
	}

	for i, k := range kinds {
		y := rowsTop + float64(i)*(rowHeight+rowGap)
		color, ok := markColors[k]
		if !ok {
			color = otherColor
		}
		row := svgRow{Label: k, LabelY: f1(y + rowHeight/2 + 5), Y: f1(y), H: f1(rowHeight), Color: color,
			BaselineY: f1(y + rowHeight)}
		c := counts[k]
		for col := 0; col < plotWidth; {
			if c[col] == 0 {
				col++
				continue
			}
			row.Count += c[col]
			op := markOpacity(c[col])
			end := col + 1
			for end < plotWidth && c[end] > 0 && markOpacity(c[end]) == op {
				row.Count += c[end]
				end++
			}
			row.Marks = append(row.Marks, svgRect{X: f1(plotLeft + float64(col)), Y: row.Y, W: f1(float64(end - col)), H: row.H,
				Fill: color, Opacity: op})
			col = end
		}
		row.CountText = quantity(float64(row.Count), "")
		v.DrawnMarks += len(row.Marks)
		v.Rows = append(v.Rows, row)
	}

	step := tickStep(dur)
	for i := 0; ; i++ {
		t := float64(i) * step
		if t > dur*(1+1e-9) {
			break
		}
		v.Ticks = append(v.Ticks, svgTick{X: f1(xOf(t)), Label: strconv.FormatFloat(t, 'f', -1, 64)})
	}

	// The legend: the states, the fault windows, the reference ticks; on
	// as many lines as it needs.
	legendY := axisY + 60
	x := float64(plotLeft)
	add := func(fill, label, kind string) {
		w := 18 + 7*float64(len([]rune(label))) + 16
		if x > plotLeft && x+w-16 > svgWidth {
			x, legendY = plotLeft, legendY+21
		}
		v.Legend = append(v.Legend, svgLegend{X: f1(x), Y: f1(legendY), SwatchY: f1(legendY - 11), TextX: f1(x + 18),
			Fill: fill, Kind: kind, Label: label, TickX: f1(x + 7), TickY1: f1(legendY - 12), TickY2: f1(legendY + 2)})
		x += w
	}
	seen := map[string]bool{}
	for _, s := range tl.States {
		seen[s.State] = true
	}
	for _, s := range stateOrder {
		if !seen[s] {
			continue
		}
		kind, label := "", s
		if s == "half-open" {
			kind, label = "half-open", "half-open (outlined, widened if short)"
		}
		add(stateColors[s], label, kind)
	}
	for _, s := range tl.States {
		if !slices.Contains(stateOrder, s.State) && seen[s.State] {
			seen[s.State] = false // once
			add(otherColor, s.State, "")
		}
	}
	if len(tl.Faults) > 0 {
		add("", "downstream failing", "hatch")
	}
	if len(refs) > 0 {
		add("#212121", "reference instant", "tick")
	}
	for _, r := range refs {
		if r.off {
			add("#b71c1c", "missed (outside tolerance + noise)", "tick")
			break
		}
	}

	v.Caption = tl.Caption
	if v.Caption == "" {
		v.Caption = fmt.Sprintf("%s requests over %s.", quantity(float64(v.MarkCount), ""), v.Duration)
	}
	v.Width = svgWidth
	v.Height = int(legendY + 14)
	v.ViewBox = fmt.Sprintf("0 0 %d %d", v.Width, v.Height)
	return v
}

// ref is a reference tick laid out: its x, its label row (0 at the top).
type ref struct {
	x           float64
	row         int
	label, note string
	off         bool
}

// layoutRefs merges the references that fall on the same pixel column
// (A1's transitions 2 and 3 are both at 1750 ms) and puts each label on
// the first row where it does not overlap its left neighbour; it returns
// them and the rows they take.
func layoutRefs(in []TimelineRef, xOf func(float64) float64) ([]ref, int) {
	var out []ref
	for _, r := range in {
		x := xOf(r.At)
		if n := len(out); n > 0 && math.Abs(out[n-1].x-x) < 1 {
			out[n-1].label += "," + r.Label
			out[n-1].note += "; " + r.Note
			out[n-1].off = out[n-1].off || r.Off
			continue
		}
		out = append(out, ref{x: x, label: r.Label, note: r.Note, off: r.Off})
	}
	if len(out) == 0 {
		return nil, 0
	}
	rows := 1
	ends := []float64{math.Inf(-1)} // per row, where its last label ends
	for i := range out {
		half := 4 * float64(len([]rune(out[i].label)))
		row := 0
		for row < len(ends) && out[i].x-half < ends[row]+3 {
			row++
		}
		if row == len(ends) {
			ends = append(ends, math.Inf(-1))
		}
		ends[row] = out[i].x + half
		out[i].row = row
		rows = max(rows, row+1)
	}
	// Rows count from 1, the one nearest the band.
	for i := range out {
		out[i].row++
	}
	return out, rows
}

// markOpacity is how dark a pixel column of marks is drawn: 1, 2–3, 4 or
// more marks.
func markOpacity(n int) string {
	switch {
	case n <= 1:
		return "0.6"
	case n <= 3:
		return "0.75"
	}
	return "1"
}

// tickStep is a 1-2-5 step giving at most about ten ticks over dur seconds.
func tickStep(dur float64) float64 {
	raw := dur / 10
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}
