package endpoints

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// allCases are every case of the full run, in the report's order.
var allCases = []kase{
	{proto: "grpc", fault: modeFail}, {proto: "grpc", fault: modeHang}, {proto: "grpc", fault: modeSlow}, {proto: "grpc", fault: modeFlap},
	{proto: "http", fault: modeFail}, {proto: "http", fault: modeHang}, {proto: "http", fault: modeSlow}, {proto: "http", fault: modeFlap},
	{proto: "grpc", fault: modeFail, all: true}, {proto: "http", fault: modeFail, all: true},
}

// boundedCases run by default (go test ./endpoints/), with short phases.
var boundedCases = []string{"grpc/fail", "grpc/hang", "http/fail", "grpc/all-fail"}

// cases are the cases this run selects: the bounded ones, or every case
// with -endpoints.full, narrowed by -endpoints.cases.
func cases(t *testing.T) []kase {
	only, err := regexp.Compile(*casesOnly)
	if err != nil {
		t.Fatalf("-endpoints.cases: %v", err)
	}
	var out []kase
	for _, c := range allCases {
		if (*fullMatrix || slices.Contains(boundedCases, c.name())) && only.MatchString(c.name()) {
			out = append(out, c)
		}
	}
	return out
}

// TestEndpoints runs the selected cases, every arm side by side on its
// own ten backends, reports each, and holds the per-endpoint arms to the
// issue's goal (with the allowance goal_test.go states for the run's
// noise and the fault's edge): with one backend of ten failing, hanging
// or slow, ≥ 99.9 % of the calls succeed with p99 within the healthy p99
// + 50 ms, the bad backend receives ≤ 5 % of its fair share after the
// first second, no healthy backend is refused, it is ejected within 1 s
// and readmitted within 2 s of the heal; with all ten failing, at most
// one is ejected at once and the per-method (per-host) breaker opens.
// The other arms are reported, not held.
func TestEndpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("real load on forty backends for half a minute or more; not with -short")
	}
	if *writeDocs && !*fullMatrix {
		t.Fatal("-endpoints.write-docs wants -endpoints.full: the document is the full run's")
	}
	tm := caseTiming()
	var results []*caseResult
	var failing []string
	for _, c := range cases(t) {
		t.Run(c.name(), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			run, err := runCase(c, tm)
			if err != nil {
				t.Fatal(err)
			}
			r := summarize(run, tm)
			results = append(results, r)
			t.Log("\n" + r.text())
			for _, f := range r.failures() {
				t.Error(f)
				failing = append(failing, c.name())
			}
		})
	}
	if len(failing) > 0 {
		t.Logf("cases where the goal did not hold: %s", strings.Join(slices.Compact(failing), ", "))
	}
	if *writeDocs {
		if err := writeDoc(results, tm); err != nil {
			t.Fatal(err)
		}
	}
}
