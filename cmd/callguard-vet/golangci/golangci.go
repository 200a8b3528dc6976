// Package golangci registers callguard's analyzer as a golangci-lint
// module plugin (golangci-lint v2's "custom" build): import it in
// .custom-gcl.yml and enable the linter "callguard" (docs/vet.md).
package golangci

import (
	"github.com/callguard/callguard/cmd/callguard-vet/analyzer"
	"github.com/golangci/plugin-module-register/register"
	"golang.org/x/tools/go/analysis"
)

func init() { register.Plugin("callguard", New) }

// New is the plugin's constructor; the linter takes no settings.
func New(any) (register.LinterPlugin, error) { return plugin{}, nil }

type plugin struct{}

func (plugin) BuildAnalyzers() ([]*analysis.Analyzer, error) {
	return []*analysis.Analyzer{analyzer.Analyzer}, nil
}

// GetLoadMode: the analyzer needs types (TypesInfo) to find the calls.
func (plugin) GetLoadMode() string { return register.LoadModeTypesInfo }
