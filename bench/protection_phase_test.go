package bench

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/internal/scenario"
)

// TestHealPhase measures how much of the closed-loop blackhole's gap
// between callguard and a fixed attempt timeout is the phase of the
// breaker's probe rounds against the heal: the same cell with the heal
// moved later by a fraction of a probe round (the fault 0 to 1.2 s
// longer, by 100 ms), each stack's successes by shift, and their mean
// over the shifts, which must leave callguard within 2 % of the fixed
// timeout.
//
//	cd bench && go test -run TestHealPhase -protection -v
func TestHealPhase(t *testing.T) {
	if !*protection {
		t.Skip("the heal-phase measurement runs with -protection")
	}
	var sc scenario.Scenario
	for _, s := range scenario.Scenarios {
		if s.Name == "blackhole" {
			sc = s
		}
	}
	ld := scenario.Loads[1]
	defs := map[string]stackDef{}
	for _, d := range stacks() {
		defs[d.name] = d
	}
	names := []string{"callguard", "cg-fixed-timeout", "handwired-parity"}
	var shifts []time.Duration // 0 to 1.2 s: about one probe round of a fixed 300 ms timeout (a stay of 1 s and a hung probe)
	for d := time.Duration(0); d <= 1200*time.Millisecond; d += 100 * time.Millisecond {
		shifts = append(shifts, d)
	}
	median := map[string][]int{}
	for _, d := range shifts {
		shifted := sc
		shifted.Length += d
		shifted.Healed += d
		for _, name := range names {
			def, ok := defs[name]
			if !ok {
				t.Fatalf("no stack %s", name)
			}
			var got []int
			for _, seed := range seeds {
				got = append(got, runOne(t, scenario.Cell{Server: scenario.Model, Scenario: shifted, Load: ld, Seed: seed}, def).Successes)
			}
			slices.Sort(got)
			median[name] = append(median[name], got[len(got)/2])
		}
	}
	var b strings.Builder
	b.WriteString("| heal moved by |")
	for _, name := range names {
		b.WriteString(" " + name + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(names)) + "\n")
	for i, d := range shifts {
		fmt.Fprintf(&b, "| +%v |", d)
		for _, name := range names {
			fmt.Fprintf(&b, " %d |", median[name][i])
		}
		b.WriteString("\n")
	}
	b.WriteString("| mean |")
	mean := map[string]float64{}
	for _, name := range names {
		for _, v := range median[name] {
			mean[name] += float64(v) / float64(len(shifts))
		}
		fmt.Fprintf(&b, " %.0f |", mean[name])
	}
	fmt.Fprintf(&b, "\n\nblackhole/%s, successes (median of %d seeds) by how much later the downstream heals; callguard at %.1f %% of cg-fixed-timeout over the shifts.\n", ld.Name, len(seeds), 100*mean["callguard"]/mean["cg-fixed-timeout"])
	fmt.Print(b.String())
	// The claim docs/protection.md makes: over the phases, the fixed
	// timeout's lead is gone.
	if mean["callguard"] < 0.98*mean["cg-fixed-timeout"] {
		t.Errorf("callguard %.0f against cg-fixed-timeout's %.0f over the shifts: below 98 %%, more than the phase", mean["callguard"], mean["cg-fixed-timeout"])
	}
}
