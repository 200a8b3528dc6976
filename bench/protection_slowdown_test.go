package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/scenario"
	"github.com/callguard/callguard/limit"
)

// The slowdowns (scenario.Slowdowns): the downstream gets slower and stays
// healthy, or the callers' own host stalls. No protection with the
// callers' deadline loses almost nothing there, so each cell holds the
// recommended chain against it first: a cell where no protection keeps
// more is said so, with what callguard refused and what it keeps without
// its limit, beside the best peer stack and the chain before the
// do-no-harm rules (cg-rate79-at-once).

// isSlowdown says whether c is one of the slowdowns' cells.
func (c sweepCell) isSlowdown() bool {
	return slices.ContainsFunc(scenario.Slowdowns, func(sc scenario.Scenario) bool { return sc.Name == c.scenario.Name })
}

func refused(r scenario.Result) float64 { return float64(r.Refused) }

// slowdowns is the table of the slowdowns' cells: callguard against no
// protection (ranges, then seed by seed), the requests callguard refused
// without a downstream call, callguard without its limit, the chain before
// the do-no-harm rules, and the best peer stack (documented or at
// parity); then, for each cell no protection wins, a line saying so.
func (s sweep) slowdowns() string {
	var b strings.Builder
	b.WriteString("\n### The slowdowns: callguard against no protection\n\n")
	b.WriteString("| cell | callguard | no protection | verdict | seed by seed: callguard − none | verdict, seed by seed | refused by callguard | callguard without its limit (cg-no-limit) | the chain before (cg-rate79-at-once) | best peer stack | its successes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	var lost []string
	n := 0
	for _, c := range s.cells {
		if !c.isSlowdown() {
			continue
		}
		cg, ok1 := c.find("callguard")
		none, ok2 := c.find("none")
		if !ok1 || !ok2 {
			continue
		}
		n++
		v := compare(cg, none)
		pv, lo, hi := paired(cg, none)
		ref, _, _ := cg.stat(refused)
		other := func(name string) string {
			r, ok := c.find(name)
			if !ok {
				return "–"
			}
			m, l, h := r.stat(successes)
			return fmt.Sprintf("%.0f [%.0f–%.0f]", m, l, h)
		}
		best, bestMed := "–", -1.0
		for _, name := range slices.Concat(documentedPeers, parityPeerNames) {
			if p, ok := c.find(name); ok {
				if m, _, _ := p.stat(successes); m > bestMed {
					best, bestMed = name, m
				}
			}
		}
		cell := c.scenario.Name + " / " + c.load.Name
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %+d to %+d | %s | %s | %s | %s | %s | %s |\n",
			cell, other("callguard"), other("none"), v, lo, hi, pv, fmt.Sprintf("%.0f", ref), other("cg-no-limit"), other("cg-rate79-at-once"), best, other(best))
		if v == "loss" || pv == "loss" {
			line := fmt.Sprintf("no protection beats callguard in %s (%s, seed by seed %s: %+d to %+d): callguard refused %s requests without a downstream call (median)", cell, v, pv, lo, hi, fmt.Sprintf("%.0f", ref))
			if nl, ok := c.find("cg-no-limit"); ok {
				m, _, _ := nl.stat(successes)
				lv, llo, lhi := paired(nl, none)
				line += fmt.Sprintf("; without its limit it keeps %s, seed by seed against no protection a %s (%+d to %+d)", fmt.Sprintf("%.0f", m), lv, llo, lhi)
			}
			lost = append(lost, line+".")
		}
	}
	if len(lost) == 0 {
		fmt.Fprintf(&b, "\nNo protection beats callguard in any of the %d slowdown cells, by the ranges or seed by seed.\n", n)
		return b.String()
	}
	fmt.Fprintf(&b, "\nNo protection beats callguard in %d of the %d slowdown cells:\n\n", len(lost), n)
	for _, l := range lost {
		b.WriteString("- " + l + "\n")
	}
	return b.String()
}

// TestSlowdownsTable: a slowdown cell where no protection keeps more in
// every seed is said so, with what callguard refused and what it keeps
// without its limit; a failure cell is not in the table.
func TestSlowdownsTable(t *testing.T) {
	runs := func(name string, succ, ref []int) cellRuns {
		r := cellRuns{stack: stackDef{name: name}}
		for i, n := range succ {
			r.results = append(r.results, scenario.Result{Successes: n, Refused: ref[i]})
		}
		return r
	}
	zero := []int{0, 0, 0}
	lost := sweepCell{scenario: scenario.Slowdowns[0], load: scenario.Loads[0], runs: []cellRuns{
		runs("callguard", []int{10300, 10400, 10500}, []int{600, 650, 700}),
		runs("none", []int{10900, 11000, 11100}, zero),
		runs("cg-no-limit", []int{10900, 11000, 11100}, zero),
		runs("failsafe-parity", []int{5000, 5100, 5200}, zero),
	}}
	tied := lost
	tied.scenario = scenario.Slowdowns[1]
	tied.runs = []cellRuns{runs("callguard", []int{10950, 11000, 11050}, zero), runs("none", []int{10900, 11000, 11100}, zero)}
	failure := lost
	failure.scenario = scenario.Failures[0]
	out := sweep{cells: []sweepCell{lost, tied, failure}}.slowdowns()
	for _, want := range []string{
		"| delay100 / open60 | 10400 [10300–10500] | 11000 [10900–11100] | loss | -600 to -600 | loss | 650 | 11000 [10900–11100] | – | failsafe-parity | 5100 [5000–5200] |",
		"| delay200 / open60 | 11000 [10950–11050] | 11000 [10900–11100] | tie | -50 to +50 | tie | 0 | – |",
		"No protection beats callguard in 1 of the 2 slowdown cells",
		"no protection beats callguard in delay100 / open60 (loss, seed by seed loss: -600 to -600): callguard refused 650 requests without a downstream call (median); without its limit it keeps 11000, seed by seed against no protection a tie (+0 to +0).",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the slowdowns' table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "outage") {
		t.Errorf("a failure cell in the slowdowns' table:\n%s", out)
	}
}

// TestSlowdownsKeepTheBreakerClosed: in every slowdown cell, both loads,
// every seed, the recommended chain's breaker refuses no request — the
// downstream answers every call, later — so what callguard refuses there
// is its limit's (limit.ErrLimited), logged by cell and seed.
func TestSlowdownsKeepTheBreakerClosed(t *testing.T) {
	for _, sc := range scenario.Slowdowns {
		for _, ld := range scenario.Loads {
			var byLimit []int64
			for _, seed := range seeds {
				open, limited := refusals(t, scenario.Cell{Server: scenario.Model, Scenario: sc, Load: ld, Seed: seed}, recommended)
				if open != 0 {
					t.Errorf("%s/%s, seed %d: the breaker refused %d requests of a downstream that answers every call", sc.Name, ld.Name, seed, open)
				}
				byLimit = append(byLimit, limited)
			}
			t.Logf("%s/%s: requests refused by the limit, seeds 1 to %d: %v", sc.Name, ld.Name, len(seeds), byLimit)
		}
	}
}

// refusals runs c in cell and counts the requests its breaker refused
// and those its limit refused.
func refusals(t *testing.T, cell scenario.Cell, c cg) (open, limited int64) {
	t.Helper()
	var o, l atomic.Int64
	synctest.Test(t, func(t *testing.T) {
		st, err := c.stack(cell.Seed)
		if err != nil {
			t.Fatal(err)
		}
		counting := scenario.StackFunc(func(ctx context.Context, call func(context.Context) error) error {
			err := st.Do(ctx, call)
			switch {
			case errors.Is(err, breaker.ErrOpen):
				o.Add(1)
			case errors.Is(err, limit.ErrLimited):
				l.Add(1)
			}
			return err
		})
		if _, err := scenario.Run(cell, counting); err != nil {
			t.Fatal(err)
		}
	})
	return o.Load(), l.Load()
}
