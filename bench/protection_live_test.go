package bench

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/callguard/callguard/internal/scenario"
)

// The live check of the protection model: a few cells run again in real
// time, each call crossing a real loopback socket to an HTTP server in
// another process — this test binary started again, its TestMain serving
// the simulated downstream's workers and queue (scenario.Process) — and
// the same cells in virtual time. Where virtual time ranks callguard and a
// peer at parity seed by seed (ahead, or behind, on every seed), the live
// run must rank them alike; a pair the seeds do not rank is reported, not
// ranked.
//
//	cd bench && go test -run TestProtectionLive -live -v   # about 3 minutes

var (
	live      = flag.Bool("live", false, "run the protection benchmark's live check: a few cells in real time over real loopback sockets, against the same cells in virtual time")
	liveOnly  = flag.String("live.cells", "", "with -live: only the cells whose scenario/load matches this regexp")
	liveTimes = flag.Int("live.repeat", 1, "with -live: run each cell's live half this many times, each reported")
)

// The live check's cells, stacks and seeds. The cells' timelines are
// scaled by liveScale (the service times, the policies' settings and the
// deadlines are not), in both runs alike.
var (
	liveCells  = [][2]string{{"outage", "open60"}, {"hang20", "closed20"}, {"capacity30-shallow", "open60"}, {"capacity30-deep", "open60"}, {"ramp", "open60"}}
	liveStacks = []string{"callguard", "failsafe-parity", "handwired-parity"}
	liveSeeds  = []uint64{1, 2}
)

const liveScale = 0.5

// TestMain serves as the live check's downstream process when this test
// binary is started as one (scenario.SelfProcess).
func TestMain(m *testing.M) {
	scenario.ServeIfProcess()
	os.Exit(m.Run())
}

func TestProtectionLive(t *testing.T) {
	if !*live {
		t.Skip("the live check runs with -live")
	}
	only, err := regexp.Compile(*liveOnly)
	if err != nil {
		t.Fatalf("-live.cells: %v", err)
	}
	defs := map[string]stackDef{}
	for _, d := range stacks() {
		defs[d.name] = d
	}
	var b strings.Builder
	b.WriteString("| cell | stack | virtual time | live | live / virtual | against callguard: virtual, seed by seed / live |\n|---|---|---|---|---|---|\n")
	for _, lc := range liveCells {
		if !only.MatchString(lc[0] + "/" + lc[1]) {
			continue
		}
		var sc scenario.Scenario
		for _, s := range scenario.Scenarios {
			if s.Name == lc[0] {
				sc = s.Scaled(liveScale)
			}
		}
		var ld scenario.Load
		for _, l := range scenario.Loads {
			if l.Name == lc[1] {
				ld = l
			}
		}
		if sc.Name == "" || ld.Name == "" {
			t.Fatalf("no cell %s/%s", lc[0], lc[1])
		}
		// Virtual time, on every seed of the benchmark: the pairs it
		// ranks seed by seed, and the live seeds' sum.
		virtual := map[string]cellRuns{}
		summed := map[string]int{}
		for _, name := range liveStacks {
			def, ok := defs[name]
			if !ok {
				t.Fatalf("no stack %s", name)
			}
			runs := cellRuns{stack: def}
			for _, seed := range seeds {
				res := runOne(t, scenario.Cell{Server: scenario.Model, Scenario: sc, Load: ld, Seed: seed}, def)
				runs.results = append(runs.results, res)
				if slices.Contains(liveSeeds, seed) {
					summed[name] += res.Successes
				}
			}
			virtual[name] = runs
		}
		for range *liveTimes {
			real := liveRun(t, sc, ld, defs)
			for _, name := range liveStacks {
				vs := "–"
				if name != "callguard" {
					verdict, lo, hi := paired(virtual["callguard"], virtual[name])
					dl := float64(real["callguard"])/float64(real[name]) - 1
					agrees := "not ranked"
					switch {
					case verdict == "tie":
					case (verdict == "win") == (dl > 0):
						agrees = "same order"
					default:
						agrees = "order differs"
						t.Errorf("%s/%s: callguard %s against %s in virtual time (%+d to %+d, seed by seed), %+.1f %% live", lc[0], lc[1], verdict, name, lo, hi, 100*dl)
					}
					vs = fmt.Sprintf("%s (%+d to %+d) / %+.1f %%: %s", verdict, lo, hi, 100*dl, agrees)
				}
				fmt.Fprintf(&b, "| %s / %s | %s | %d | %d | %.3f | %s |\n", lc[0], lc[1], name, summed[name], real[name], float64(real[name])/float64(summed[name]), vs)
			}
		}
	}
	fmt.Fprintf(&b, "\nSuccesses summed over seeds %v; each cell's timeline × %g. Virtual time ranks callguard against a peer when it is ahead (win) or behind (loss) on every one of seeds %v, as the benchmark's seed-by-seed verdict does; the live run must rank a ranked pair alike.\n", liveSeeds, liveScale, seeds)
	fmt.Print(b.String())
}

// liveRun runs every live stack on every live seed of one cell at once,
// each with its downstream in a process of its own, and returns each
// stack's successes summed over the seeds.
func liveRun(t *testing.T, sc scenario.Scenario, ld scenario.Load, defs map[string]stackDef) map[string]int {
	t.Helper()
	real := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range liveStacks {
		def := defs[name]
		for _, seed := range liveSeeds {
			cell := scenario.Cell{Server: scenario.Model, Scenario: sc, Load: ld, Seed: seed, Downstream: scenario.Process(scenario.SelfProcess)}
			wg.Go(func() {
				st, err := def.new(seed)
				if err != nil {
					t.Error(err)
					return
				}
				res, err := scenario.Run(cell, st)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				real[name] += res.Successes
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return real
}
