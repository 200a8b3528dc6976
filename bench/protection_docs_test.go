package bench

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/callguard/callguard/internal/scenario"
)

var writeDocs = flag.Bool("write-docs", false, "with -protection: write docs/protection.md and its SVGs")

// plotted are the stacks drawn in the successes-over-time charts.
var plotted = []struct{ name, color string }{
	{"none", "#999999"},
	{"callguard", "#d62728"},
	{"failsafe", "#1f77b4"},
	{"failsafe-same", "#17becf"},
	{"handwired-same", "#2ca02c"},
	{"failsafe-parity", "#9467bd"},
}

// svg draws one cell's successes per second, a line per plotted stack (the
// median over the seeds, second by second), the fault shaded.
func (c sweepCell) svg() string {
	const w, h, left, top, bottom = 720, 300, 50, 20, 40
	secs := 0
	var lines []string
	ymax := 1.0
	series := map[string][]float64{}
	for _, p := range plotted {
		r, ok := c.find(p.name)
		if !ok {
			continue
		}
		n := len(r.results[0].Timeline)
		secs = max(secs, n)
		med := make([]float64, n)
		for s := range n {
			vs := make([]float64, 0, len(r.results))
			for _, res := range r.results {
				if s < len(res.Timeline) {
					vs = append(vs, float64(res.Timeline[s]))
				}
			}
			sortFloats(vs)
			med[s] = vs[len(vs)/2]
			ymax = max(ymax, med[s])
		}
		series[p.name] = med
	}
	ymax *= 1.1
	x := func(s float64) float64 { return left + s*float64(w-left-10)/float64(max(secs, 1)) }
	y := func(v float64) float64 { return float64(h-bottom) - v*float64(h-bottom-top)/ymax }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	f0, f1 := c.scenario.Start.Seconds(), (c.scenario.Start + c.scenario.Length).Seconds()
	fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#f3d9d9"/>`+"\n", x(f0), top, x(f1)-x(f0), h-bottom-top)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#a33">fault: %s</text>`+"\n", x(f0)+4, top+12, c.scenario.Name)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, h-bottom, w-10, h-bottom)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, top, left, h-bottom)
	for s := 0; s <= secs; s += 10 {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%ds</text>`+"\n", x(float64(s)), h-bottom+14, s)
	}
	for _, v := range []float64{0, ymax / 2 / 1.1, ymax / 1.1} {
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-4, y(v)+4, v)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d">successes per second (median of %d seeds), %s load</text>`+"\n", left+4, h-6, len(seeds), c.load.Name)
	for i, p := range plotted {
		med, ok := series[p.name]
		if !ok {
			continue
		}
		pts := make([]string, len(med))
		for s, v := range med {
			pts[s] = fmt.Sprintf("%.1f,%.1f", x(float64(s)+0.5), y(v))
		}
		lines = append(lines, fmt.Sprintf(`<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, p.color, strings.Join(pts, " ")))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="3" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			w-170, top+14*i+6, p.color, w-156, top+14*i+10, p.name)
	}
	b.WriteString(strings.Join(lines, "\n"))
	b.WriteString("\n</svg>\n")
	return b.String()
}

func sortFloats(vs []float64) {
	for i := 1; i < len(vs); i++ {
		for j := i; j > 0 && vs[j] < vs[j-1]; j-- {
			vs[j], vs[j-1] = vs[j-1], vs[j]
		}
	}
}

// write writes docs/protection.md and docs/protection/*.svg.
func (s sweep) write(t *testing.T) {
	dir := filepath.Join("..", "docs")
	if err := os.MkdirAll(filepath.Join(dir, "protection"), 0o755); err != nil {
		t.Fatal(err)
	}
	var charts strings.Builder
	for _, c := range s.cells {
		if c.load.Name != scenario.Loads[0].Name {
			continue
		}
		name := c.scenario.Name + ".svg"
		if err := os.WriteFile(filepath.Join(dir, "protection", name), []byte(c.svg()), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&charts, "![%s](protection/%s)\n\n", c.scenario.Name, name)
	}
	const marker = "<!-- Below: written by `cd bench && go test -run TestProtection -protection -write-docs`. -->"
	old, err := os.ReadFile(filepath.Join(dir, "protection.md"))
	if err != nil {
		t.Fatal(err)
	}
	intro, _, _ := strings.Cut(string(old), marker)
	doc := intro + marker + "\n\n## Successes over time (open loop)\n\n" + charts.String() + "## Every cell\n" + s.tables()
	if err := os.WriteFile(filepath.Join(dir, "protection.md"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}
