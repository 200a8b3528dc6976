package faults

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// boundedCells are the cells that run by default (go test ./faults/):
// the latency shift, the blackhole, the outage and a flaky fault, short
// windows.
var boundedCells = []string{
	"grpc/shift-x10", "http/latency-100ms",
	"grpc/blackhole", "http/blackhole",
	"grpc/outage", "http/outage",
	"http/reset-bursts", "grpc/limit-data",
}

// cells are the cells this run selects: the bounded matrix, or every
// cell with -faults.full, narrowed by -faults.cells.
func cells(t *testing.T) []cell {
	only, err := regexp.Compile(*cellsOnly)
	if err != nil {
		t.Fatalf("-faults.cells: %v", err)
	}
	var out []cell
	for _, f := range faultList {
		for _, p := range f.protos {
			c := cell{proto: p, fault: f}
			if (*fullMatrix || slices.Contains(boundedCells, c.name())) && only.MatchString(c.name()) {
				out = append(out, c)
			}
		}
	}
	return out
}

// TestFaults runs the selected cells and holds standard to the "do no
// harm" invariant in each: wherever plain succeeds, standard succeeds at
// least 0.98 times as often (a rate: successes over calls started), less
// the noise's tolerance, during the fault
// and in the recovery after it; where protection matters (blackhole,
// dial hang, outage, paused server) the server receives no more calls
// from standard than from plain and standard's first success comes
// within 1 s of the heal; during an outage or a dial that hangs,
// standard's requests fail fast.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite runs real load for a minute or more; not with -short")
	}
	// toxiproxy's toxics keep a goroutine blocked for good when the
	// connection they write to closes with data in flight (link.write
	// stops reading; the stub's send has no way out): toxiproxy's, not
	// the suite's, and not ended by anything the suite can call.
	leaks := []goleak.Option{goleak.IgnoreCurrent(), goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run")}
	lb := newLab()
	tm := cellTiming()
	var results []*cellResult
	var failing []string
	for _, c := range cells(t) {
		t.Run(c.name(), func(t *testing.T) {
			defer goleak.VerifyNone(t, leaks...)
			if c.proto == "nginx" && nginxPath() == "" {
				if os.Getenv("CI") != "" {
					t.Fatal("nginx is not installed (.ci/run installs nginx-light)")
				}
				t.Skip("nginx is not installed")
			}
			run, err := runCell(lb, c, tm)
			if err != nil {
				t.Fatal(err)
			}
			r := summarize(c, run)
			results = append(results, r)
			t.Log("\n" + r.text())
			failed := r.failures()
			if len(failed) == 0 {
				return
			}
			failing = append(failing, c.name())
			for _, f := range failed {
				t.Error(f)
			}
		})
	}
	if len(failing) > 0 {
		t.Logf("cells where the invariant did not hold: %s", strings.Join(failing, ", "))
	}
	if *writeDocs {
		if err := writeFaultsDoc(results, tm); err != nil {
			t.Fatal(err)
		}
	}
}
