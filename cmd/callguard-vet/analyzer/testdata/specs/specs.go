// Package specs names spec files the analyzer lints: by a comment, and
// by a //go:embed directive on a variable passed to spec.Parse.
package specs

import (
	_ "embed"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/spec"
)

//callguard:spec flagged.yaml // want `spec flagged.yaml: chain: warning CG002: retry\(3\) is inside breaker`

//callguard:spec broken.yaml // want `spec broken.yaml: spec: line 2: chain\[0\].breaker.openTimeout`

//callguard:spec missing.yaml // want `callguard:spec: open .*missing.yaml`

//go:embed clean.yaml
var clean []byte

//go:embed flagged.yaml
var flagged string // want `spec flagged.yaml: chain: warning CG002`

// Chains builds the embedded specs' chains.
func Chains() (*chain.Chain, *chain.Chain, error) {
	a, err := spec.Parse(clean)
	if err != nil {
		return nil, nil, err
	}
	b, err := spec.Parse([]byte(flagged))
	if err != nil {
		return nil, nil, err
	}
	ca, err := a.Chain()
	if err != nil {
		return nil, nil, err
	}
	cb, err := b.Chain()
	return ca, cb, err
}
