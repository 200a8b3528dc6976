package analyzer_test

import (
	"encoding/json"
	"go/ast"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/cmd/callguard-vet/analyzer"
	"golang.org/x/tools/go/analysis/analysistest"
)

// TestAnalyzer: every rule's chain (testdata/rules) and the guards
// against guessing (testdata/guards: settings unknown, slices, loops, a
// user's own policy, suppression) and the spec files named or embedded
// (testdata/specs) give the findings their // want comments expect, at
// the lines they are on.
func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, testdata(t), analyzer.Analyzer, "./rules", "./guards", "./specs")
}

// TestSameFindingsAsChainNew: the analyzer's findings on each of
// testdata/rules' functions are, word for word, what chain.New says when
// the same function runs (testdata/cmd/findings runs them); and the
// fixture has a chain for every rule the lint has.
func TestSameFindingsAsChainNew(t *testing.T) {
	dir := testdata(t)
	cmd := exec.Command("go", "run", "./cmd/findings")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run ./cmd/findings: %v", err)
	}
	var runtime map[string][]string
	if err := json.Unmarshal(out, &runtime); err != nil {
		t.Fatal(err)
	}

	static := map[string][]string{}
	for _, r := range analysistest.Run(silent{t}, dir, analyzer.Analyzer, "./rules") {
		for _, d := range r.Diagnostics {
			for _, f := range r.Pass.Files {
				for _, decl := range f.Decls {
					if fd, ok := decl.(*ast.FuncDecl); ok && fd.Pos() <= d.Pos && d.Pos < fd.End() {
						static[fd.Name.Name] = append(static[fd.Name.Name], d.Message)
					}
				}
			}
		}
	}
	if len(runtime) == 0 {
		t.Fatal("no function ran")
	}
	codes := map[string]bool{}
	for name, want := range runtime {
		got := static[name]
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s:\nthe analyzer: %q\nchain.New:    %q", name, got, want)
		}
		for _, m := range want {
			for _, r := range chain.Rules() {
				if containsCode(m, r.Code) {
					codes[r.Code] = true
				}
			}
		}
	}
	for _, r := range chain.Rules() {
		if !codes[r.Code] && r.Code != "CG020" { // retired: never reported
			t.Errorf("no chain in testdata/rules draws %s (%s)", r.Code, r.Summary)
		}
	}
}

func containsCode(msg, code string) bool {
	for i := 0; i+len(code) <= len(msg); i++ {
		if msg[i:i+len(code)] == code {
			return true
		}
	}
	return false
}

func testdata(t *testing.T) string {
	dir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// silent runs analysistest for its results only: the // want comments
// are TestAnalyzer's to check.
type silent struct{ t *testing.T }

func (s silent) Errorf(string, ...any) {}
