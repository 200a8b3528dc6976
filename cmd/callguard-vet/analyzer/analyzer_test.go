package analyzer_test

import (
	"cmp"
	"encoding/json"
	"go/ast"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/cmd/callguard-vet/analyzer"
	"golang.org/x/tools/go/analysis/analysistest"
)

// TestAnalyzer: every rule's chain (testdata/rules) and the guards
// against guessing (testdata/guards: settings unknown, slices, loops, a
// user's own policy, suppression) and the spec files named or embedded
// (testdata/specs) give the findings their // want comments expect, at
// the lines they are on, with -infos (the fixtures expect infos too).
func TestAnalyzer(t *testing.T) {
	withInfos(t, true)
	analysistest.Run(t, testdata(t), analyzer.Analyzer, "./rules", "./guards", "./specs")
}

// TestSameFindingsAsChainNew: the analyzer's findings on each of
// testdata/rules' functions are, word for word, what chain.New says when
// the same function runs (testdata/cmd/findings runs them); and the
// fixture has a chain for every rule the lint has.
func TestSameFindingsAsChainNew(t *testing.T) {
	withInfos(t, true)
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

// TestInfosOnRequest: without -infos, the recommended chain.New(retry,
// breaker, timeout), whose only finding is an info (CG015), draws
// nothing, and warnings are reported all the same (testdata/vet/bad's //
// want comments, CG015 among its infos not reported); with -infos, the
// info is reported.
func TestInfosOnRequest(t *testing.T) {
	withInfos(t, false)
	dir := testdata(t)
	analysistest.Run(t, dir, analyzer.Analyzer, "./vet/canonical", "./vet/bad")

	withInfos(t, true)
	var got []string
	for _, r := range analysistest.Run(silent{t}, dir, analyzer.Analyzer, "./vet/canonical") {
		for _, d := range r.Diagnostics {
			got = append(got, d.Message)
		}
	}
	if len(got) != 1 || !containsCode(got[0], "info CG015") {
		t.Errorf("with -infos, the recommended chain draws %q, want its info CG015 alone", got)
	}
}

// TestSorted: each package's findings are reported in the order of their
// positions (file, line, column), though a file's spec files are linted
// before its calls (testdata/vet/bad names one at its end) and a chain's
// findings come in the order of its rules.
func TestSorted(t *testing.T) {
	for _, infos := range []bool{false, true} {
		withInfos(t, infos)
		for _, r := range analysistest.Run(silent{t}, testdata(t), analyzer.Analyzer, "./vet/bad", "./rules", "./guards", "./specs") {
			var prev token.Position
			for i, d := range r.Diagnostics {
				p := r.Pass.Fset.Position(d.Pos)
				if i > 0 && cmp.Or(cmp.Compare(p.Filename, prev.Filename), cmp.Compare(p.Line, prev.Line), cmp.Compare(p.Column, prev.Column)) < 0 {
					t.Errorf("-infos=%v, %s: %s reported after %s", infos, r.Pass.Pkg.Path(), p, prev)
				}
				prev = p
			}
			if len(r.Diagnostics) < 2 {
				t.Errorf("-infos=%v, %s: %d findings, want at least 2 for an order to check", infos, r.Pass.Pkg.Path(), len(r.Diagnostics))
			}
		}
	}
}

// withInfos sets the analyzer's flag -infos for the test, and restores it
// after.
func withInfos(t *testing.T, on bool) {
	t.Helper()
	f := analyzer.Analyzer.Flags.Lookup("infos")
	if f == nil {
		t.Fatal("the analyzer has no flag -infos")
	}
	old := f.Value.String()
	if err := f.Value.Set(strconv.FormatBool(on)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Value.Set(old) })
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
