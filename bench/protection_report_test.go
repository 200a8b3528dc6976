package bench

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/internal/scenario"
)

// sweep is every stack's runs in every cell.
type sweep struct {
	cells []sweepCell
}

type sweepCell struct {
	server   scenario.Server
	scenario scenario.Scenario
	load     scenario.Load
	runs     []cellRuns
}

// fastErrors is the cost of an error answer in the cells named
// errorCostSuffix: 2 ms of a worker, a downstream that fails fast (the
// independent benchmark's model), where the model's errors cost a full
// service time.
const (
	fastErrors      = 2 * time.Millisecond
	errorCostSuffix = "-errors2ms"
)

// sweepCells are the sweep's cells: every failure under every load
// against the model, then the failures whose answers are errors (the
// ramp) again against the model with errors costing fastErrors, the
// scenario's name marked errorCostSuffix, then every slowdown under every
// load. With -cells, only the cells whose "scenario/load" matches.
func sweepCells() []sweepCell {
	var out []sweepCell
	add := func(srv scenario.Server, sc scenario.Scenario) {
		for _, ld := range scenario.Loads {
			if *onlyCells == "" || regexp.MustCompile(*onlyCells).MatchString(sc.Name+"/"+ld.Name) {
				out = append(out, sweepCell{server: srv, scenario: sc, load: ld})
			}
		}
	}
	for _, sc := range scenario.Failures {
		add(scenario.Model, sc)
	}
	for _, sc := range scenario.Failures {
		if sc.Name == "ramp" {
			srv := scenario.Model
			srv.ErrorCost = fastErrors
			sc.Name += errorCostSuffix
			add(srv, sc)
		}
	}
	for _, sc := range scenario.Slowdowns {
		add(scenario.Model, sc)
	}
	return out
}

// cell is the scenario's cell of c for seed.
func (c sweepCell) cell(seed uint64) scenario.Cell {
	return scenario.Cell{Server: c.server, Scenario: c.scenario, Load: c.load, Seed: seed}
}

// ceiling is the most successes the downstream allows in c
// (scenario.Ceiling).
func (c sweepCell) ceiling() float64 { return scenario.Ceiling(c.server, c.scenario, c.load) }

func runSweep(t *testing.T) sweep {
	var s sweep
	defs := stacks()
	for _, c := range sweepCells() {
		c.runs = make([]cellRuns, len(defs))
		for i, def := range defs {
			c.runs[i] = cellRuns{stack: def, results: make([]scenario.Result, len(seeds))}
		}
		s.cells = append(s.cells, c)
	}
	// Every run in a bubble of its own, as many at once as there are CPUs.
	t.Run("runs", func(t *testing.T) {
		for _, c := range s.cells {
			for _, r := range c.runs {
				for k, seed := range seeds {
					t.Run(fmt.Sprintf("%s/%s/%s/%d", c.scenario.Name, c.load.Name, r.stack.name, seed), func(t *testing.T) {
						t.Parallel()
						r.results[k] = runOne(t, c.cell(seed), r.stack)
					})
				}
			}
		}
	})
	return s
}

// find returns the runs of the stack named name.
func (c sweepCell) find(name string) (cellRuns, bool) {
	for _, r := range c.runs {
		if r.stack.name == name {
			return r, true
		}
	}
	return cellRuns{}, false
}

func successes(r scenario.Result) float64 { return float64(r.Successes) }

// compare says whether a beats b on successes: "win" if a's worst seed is
// above b's best, "loss" if a's best is below b's worst, "tie" otherwise
// (within the seeds' spread).
func compare(a, b cellRuns) string {
	_, alo, ahi := a.stat(successes)
	_, blo, bhi := b.stat(successes)
	switch {
	case alo > bhi:
		return "win"
	case ahi < blo:
		return "loss"
	}
	return "tie"
}

// paired compares a and b seed by seed (the same seed: the same arrivals,
// service times and faults for both): "win" if a has more successes in
// every seed, "loss" if fewer in every seed, "tie" otherwise; lo and hi
// are the range of a's successes less b's over the seeds. Where the
// seeds' own spread (an open loop's arrivals) is wider than the gap
// between two stacks, the ranges overlap whatever the stacks do; the
// same seed's difference is what the stacks changed.
func paired(a, b cellRuns) (verdict string, lo, hi int) {
	lo, hi = math.MaxInt, math.MinInt
	for i := range min(len(a.results), len(b.results)) {
		d := a.results[i].Successes - b.results[i].Successes
		lo, hi = min(lo, d), max(hi, d)
	}
	switch {
	case lo > 0:
		return "win", lo, hi
	case hi < 0:
		return "loss", lo, hi
	}
	return "tie", lo, hi
}

func secs(v float64) string {
	if v < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s", v)
}

// tables renders the sweep as Markdown.
func (s sweep) tables() string {
	var b strings.Builder
	for _, c := range s.cells {
		fmt.Fprintf(&b, "\n### %s, %s\n\n", c.scenario.Name, c.load.Name)
		b.WriteString("| stack | successes (median [range]) | goodput in fault / after | amplification | p50 / p99 | detect | recover (healed at " + fmt.Sprint(c.scenario.Healed) + ") | wasted | queue | metastable |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range c.runs {
			med, lo, hi := r.stat(successes)
			gf, _, _ := r.stat(metrics[1].f)
			ga, _, _ := r.stat(metrics[2].f)
			amp, _, _ := r.stat(metrics[3].f)
			p50, _, _ := r.stat(metrics[4].f)
			p99, _, _ := r.stat(metrics[5].f)
			det, _, _ := r.stat(metrics[6].f)
			rec, _, _ := r.stat(metrics[7].f)
			wst, _, _ := r.stat(metrics[8].f)
			q, _, _ := r.stat(metrics[9].f)
			meta, _, _ := r.stat(metrics[10].f)
			fmt.Fprintf(&b, "| %s | %.0f [%.0f–%.0f] | %.1f / %.1f /s | %.2f | %.0f / %.0f ms | %s | %s | %.1f s | %.1f | %s |\n",
				r.stack.name, med, lo, hi, gf, ga, amp, p50, p99, secs(det), secs(rec), wst, q, map[bool]string{true: "yes", false: "no"}[meta > 0])
		}
	}
	b.WriteString(s.slowdowns())
	b.WriteString("\n### callguard against each peer (successes, wins / losses / ties over the cells)\n\n")
	for _, peer := range []string{"failsafe", "failsafe-budget", "handwired", "failsafe-same", "handwired-same", "failsafe-same+throttler", "failsafe-same+limiter", "failsafe-same+bulkhead", "failsafe-parity", "handwired-parity", "cg-no-limit", "cg-counts-refusals", "none", "naive-retry"} {
		w, l, tie := 0, 0, 0
		var lost []string
		for _, c := range s.cells {
			a, ok1 := c.find("callguard")
			p, ok2 := c.find(peer)
			if !ok1 || !ok2 {
				continue
			}
			switch compare(a, p) {
			case "win":
				w++
			case "loss":
				l++
				lost = append(lost, c.scenario.Name+"/"+c.load.Name)
			default:
				tie++
			}
		}
		fmt.Fprintf(&b, "- vs %s: %d wins, %d losses, %d ties", peer, w, l, tie)
		if len(lost) > 0 {
			fmt.Fprintf(&b, " (lost: %s)", strings.Join(lost, ", "))
		}
		b.WriteString("\n")
	}
	b.WriteString(s.bestPeers("documented peer stack", documentedPeers))
	b.WriteString(s.bestPeers("peer stack, documented or at parity", slices.Concat(documentedPeers, parityPeerNames)))
	b.WriteString(s.frontier())
	b.WriteString(s.frontierAtProtection())
	b.WriteString("\n### Configurations\n\n")
	for _, d := range stacks() {
		fmt.Fprintf(&b, "- **%s**: %s\n", d.name, d.config)
	}
	return b.String()
}

// documentedPeers are the peers' whole stacks (retry, breaker, timeout,
// and an overload policy where named) as their docs show them, as documented
// or at callguard's numbers; parityPeerNames are the peers as a careful
// engineer configures them (parityPeers). In each cell, callguard's
// recommended chain is held against the best of the documented ones and
// against the best of all.
var (
	documentedPeers = []string{"failsafe", "failsafe-budget", "handwired", "failsafe-same", "handwired-same", "failsafe-same+throttler", "failsafe-same+limiter", "failsafe-same+bulkhead"}
	parityPeerNames = []string{"failsafe-parity", "handwired-parity"}
)

// bestPeers is the table of callguard against the best of the peer stacks
// named (by median successes) in each cell, under the title what.
func (s sweep) bestPeers(what string, names []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### callguard against the best %s of each cell\n\n", what)
	b.WriteString("| cell | callguard | best peer | its successes | verdict | seed by seed: callguard − peer | verdict, seed by seed |\n|---|---|---|---|---|---|---|\n")
	w, l, t := 0, 0, 0
	pw, pl, pt := 0, 0, 0
	for _, c := range s.cells {
		a, ok := c.find("callguard")
		if !ok {
			continue
		}
		var best cellRuns
		bestMed := -1.0
		for _, name := range names {
			if p, ok := c.find(name); ok {
				if med, _, _ := p.stat(metrics[0].f); med > bestMed {
					best, bestMed = p, med
				}
			}
		}
		if bestMed < 0 {
			continue
		}
		v := compare(a, best)
		switch v {
		case "win":
			w++
		case "loss":
			l++
		default:
			t++
		}
		pv, dlo, dhi := paired(a, best)
		switch pv {
		case "win":
			pw++
		case "loss":
			pl++
		default:
			pt++
		}
		am, alo, ahi := a.stat(metrics[0].f)
		pm, plo, phi := best.stat(metrics[0].f)
		fmt.Fprintf(&b, "| %s / %s | %.0f [%.0f–%.0f] | %s | %.0f [%.0f–%.0f] | %s | %+d to %+d | %s |\n", c.scenario.Name, c.load.Name, am, alo, ahi, best.stack.name, pm, plo, phi, v, dlo, dhi, pv)
	}
	fmt.Fprintf(&b, "\n%d wins, %d losses, %d ties against the best %s of each cell (ranges apart); seed by seed, %d wins, %d losses, %d ties.\n", w, l, t, what, pw, pl, pt)
	return b.String()
}

// frontierOf returns, in cell c, the stack with the most successes
// (median) of every stack measured there — peers, no protection, a naive
// retry, every ablation and experiment — and callguard's runs (ok false
// without them).
func (c sweepCell) frontierOf() (best, cg cellRuns, ok bool) {
	return c.bestWhere(func(cellRuns) bool { return true })
}

// bestWhere returns, in cell c, the stack with the most successes
// (median) of those keep admits, and callguard's runs (ok false without
// callguard or any admitted stack).
func (c sweepCell) bestWhere(keep func(cellRuns) bool) (best, cg cellRuns, ok bool) {
	if cg, ok = c.find("callguard"); !ok {
		return
	}
	bestMed := -1.0
	for _, r := range c.runs {
		if med, _, _ := r.stat(successes); keep(r) && med > bestMed {
			best, bestMed = r, med
		}
	}
	return best, cg, bestMed >= 0
}

// frontier is the table of callguard against the best stack measured in
// each cell, as a fraction of it, with the verdict (a loss: the frontier's
// worst seed above callguard's best), and against the cell's ceiling, the
// most successes the downstream allows (scenario.Ceiling).
func (s sweep) frontier() string {
	var b strings.Builder
	b.WriteString("\n### callguard against the frontier (the best stack measured in each cell) and the ceiling (what the downstream allows)\n\n")
	b.WriteString("| cell | callguard | the best stack | its successes | callguard / best | verdict | ceiling | callguard / ceiling |\n|---|---|---|---|---|---|---|---|\n")
	at98 := 0
	n := 0
	for _, c := range s.cells {
		best, cg, ok := c.frontierOf()
		if !ok {
			continue
		}
		n++
		am, alo, ahi := cg.stat(successes)
		bm, blo, bhi := best.stat(successes)
		frac := am / bm
		if frac >= 0.98 {
			at98++
		}
		ofCeiling := "–"
		ceil := c.ceiling()
		if ceil > 0 {
			ofCeiling = fmt.Sprintf("%.1f %%", 100*am/ceil)
		}
		fmt.Fprintf(&b, "| %s / %s | %.0f [%.0f–%.0f] | %s | %.0f [%.0f–%.0f] | %.1f %% | %s | %.0f | %s |\n",
			c.scenario.Name, c.load.Name, am, alo, ahi, best.stack.name, bm, blo, bhi, 100*frac, compare(cg, best), ceil, ofCeiling)
	}
	fmt.Fprintf(&b, "\ncallguard is at 98 %% of the frontier or more in %d of %d cells.\n", at98, n)
	return b.String()
}

// Protection as much as callguard's, in a cell: at most this many more
// downstream calls per request than callguard's, and at most this share
// (and slack) of the worker time callguard's requests wasted on callers
// that had given up (a hedge's losers, calls queued past their deadline).
const (
	moreCalls   = 0.05
	moreWasted  = 1.25
	wastedSlack = 1.0 // seconds
)

// frontierAtProtectionOf returns the stack of cell c with the most
// successes (median) among those that cost the downstream no more than
// callguard does (moreCalls, moreWasted), and callguard's runs.
func (c sweepCell) frontierAtProtectionOf() (best, cg cellRuns, ok bool) {
	cg, ok = c.find("callguard")
	if !ok {
		return
	}
	amp, _, _ := cg.stat(metrics[3].f)
	wasted, _, _ := cg.stat(metrics[8].f)
	return c.bestWhere(func(r cellRuns) bool {
		a, _, _ := r.stat(metrics[3].f)
		w, _, _ := r.stat(metrics[8].f)
		return r.stack.name != "callguard" && a <= amp+moreCalls && w <= moreWasted*wasted+wastedSlack
	})
}

// frontierAtProtection is the table of callguard against the best stack
// of each cell that protects the downstream as much: the frontier a
// stack reaches by sending more calls (a naive retry, a hedge) left out.
func (s sweep) frontierAtProtection() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### callguard against the frontier at equal protection (the best stack sending at most %g more downstream calls a request, and wasting at most %g × callguard's worker time + %g s)\n\n", moreCalls, moreWasted, wastedSlack)
	b.WriteString("| cell | callguard | the best stack | its successes | callguard / best | verdict | seed by seed: callguard − it | verdict, seed by seed |\n|---|---|---|---|---|---|---|---|\n")
	at98, n, losses := 0, 0, 0
	for _, c := range s.cells {
		best, cg, ok := c.frontierAtProtectionOf()
		if !ok {
			continue
		}
		n++
		am, alo, ahi := cg.stat(successes)
		bm, blo, bhi := best.stat(successes)
		if am/bm >= 0.98 {
			at98++
		}
		v := compare(cg, best)
		if v == "loss" {
			losses++
		}
		pv, dlo, dhi := paired(cg, best)
		fmt.Fprintf(&b, "| %s / %s | %.0f [%.0f–%.0f] | %s | %.0f [%.0f–%.0f] | %.1f %% | %s | %+d to %+d | %s |\n",
			c.scenario.Name, c.load.Name, am, alo, ahi, best.stack.name, bm, blo, bhi, 100*am/bm, v, dlo, dhi, pv)
	}
	fmt.Fprintf(&b, "\nAt equal protection, callguard is at 98 %% of the best or more in %d of %d cells, and loses %d (ranges apart).\n", at98, n, losses)
	return b.String()
}
