package bench

import (
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/callguard/callguard/internal/scenario"
)

// The live check of the protection model: a few cells run again in real
// time, each call crossing a real loopback HTTP server in front of the
// simulated downstream (its workers and queue, scenario.Loopback), and
// the same cells in virtual time; callguard and the peers at parity must
// rank alike in both.
//
//	cd bench && go test -run TestProtectionLive -live -v   # about 3 minutes

var live = flag.Bool("live", false, "run the protection benchmark's live check: a few cells in real time over real loopback sockets, against the same cells in virtual time")

// The live check's cells, stacks and seeds. The cells' timelines are
// scaled by liveScale (the service times, the policies' settings and the
// deadlines are not), in both runs alike.
var (
	liveCells  = [][2]string{{"outage", "open60"}, {"hang20", "closed20"}, {"capacity30-shallow", "open60"}, {"ramp", "open60"}}
	liveStacks = []string{"callguard", "failsafe-parity", "handwired-parity"}
	liveSeeds  = []uint64{1, 2}
)

const liveScale = 0.5

// liveTie is the gap, in virtual time, below which two stacks are not
// ranked: the live run's timing moves successes by about that much.
const liveTie = 0.02

func TestProtectionLive(t *testing.T) {
	if !*live {
		t.Skip("the live check runs with -live")
	}
	defs := map[string]stackDef{}
	for _, d := range stacks() {
		defs[d.name] = d
	}
	var b strings.Builder
	b.WriteString("| cell | stack | virtual time | live | live / virtual | against callguard, virtual / live |\n|---|---|---|---|---|---|\n")
	for _, lc := range liveCells {
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
		virtual := map[string]int{}
		real := map[string]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, name := range liveStacks {
			def, ok := defs[name]
			if !ok {
				t.Fatalf("no stack %s", name)
			}
			for _, seed := range liveSeeds {
				cell := scenario.Cell{Server: scenario.Model, Scenario: sc, Load: ld, Seed: seed}
				virtual[name] += runOne(t, cell, def).Successes
				cell.Network = scenario.Loopback
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
		for _, name := range liveStacks {
			vs := "–"
			if name != "callguard" {
				dv := float64(virtual["callguard"])/float64(virtual[name]) - 1
				dl := float64(real["callguard"])/float64(real[name]) - 1
				verdict := "same order"
				switch {
				case -liveTie < dv && dv < liveTie:
					verdict = "a tie in virtual time"
				case (dv > 0) != (dl > 0):
					verdict = "order differs"
					t.Errorf("%s/%s: callguard %+.1f %% against %s in virtual time, %+.1f %% live", lc[0], lc[1], 100*dv, name, 100*dl)
				}
				vs = fmt.Sprintf("%+.1f %% / %+.1f %%: %s", 100*dv, 100*dl, verdict)
			}
			fmt.Fprintf(&b, "| %s / %s | %s | %d | %d | %.3f | %s |\n", lc[0], lc[1], name, virtual[name], real[name], float64(real[name])/float64(virtual[name]), vs)
		}
	}
	fmt.Fprintf(&b, "\nSuccesses summed over seeds %v; each cell's timeline × %g.\n", liveSeeds, liveScale)
	fmt.Print(b.String())
}
