// Command callguard-vet reports, before the program runs, what chain.New's
// order lint will report when it does: run it as
//
//	go install github.com/callguard/callguard/cmd/callguard-vet@latest
//	go vet -vettool=$(go env GOPATH)/bin/callguard-vet ./...
//
// or on its own (callguard-vet ./...). See docs/vet.md and package
// analyzer.
package main

import (
	"github.com/callguard/callguard/cmd/callguard-vet/analyzer"
	"golang.org/x/tools/go/analysis/singlechecker"
)

func main() { singlechecker.Main(analyzer.Analyzer) }
