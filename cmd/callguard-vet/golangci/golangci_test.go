package golangci_test

import (
	"testing"

	"github.com/callguard/callguard/cmd/callguard-vet/analyzer"
	_ "github.com/callguard/callguard/cmd/callguard-vet/golangci"
	"github.com/golangci/plugin-module-register/register"
)

// TestRegistered: golangci-lint finds the plugin by its name, and gets
// the analyzer, loaded with types.
func TestRegistered(t *testing.T) {
	newPlugin, err := register.GetPlugin("callguard")
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPlugin(nil)
	if err != nil {
		t.Fatal(err)
	}
	as, err := p.BuildAnalyzers()
	if err != nil || len(as) != 1 || as[0] != analyzer.Analyzer {
		t.Errorf("analyzers %v, %v; want callguard's", as, err)
	}
	if m := p.GetLoadMode(); m != register.LoadModeTypesInfo {
		t.Errorf("load mode %q, want %q", m, register.LoadModeTypesInfo)
	}
}
