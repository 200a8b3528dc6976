// Command callguard-vet reports, before the program runs, what chain.New's
// order lint will report when it does: install it from a checkout of
// callguard and run it through go vet,
//
//	cd cmd/callguard-vet && go install .
//	go vet -vettool=$(go env GOPATH)/bin/callguard-vet ./...
//
// or on its own (callguard-vet ./...). Warnings and errors are reported
// always, infos with -infos. Not go install ...@latest: this module's
// go.mod replaces the kit's module with the checkout, and go install
// pkg@version refuses a module with a replace. See docs/vet.md and
// package analyzer.
package main

import (
	"github.com/callguard/callguard/cmd/callguard-vet/analyzer"
	"golang.org/x/tools/go/analysis/singlechecker"
)

func main() { singlechecker.Main(analyzer.Analyzer) }
