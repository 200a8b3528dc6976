// Package bad has two warnings and infos: a retry inside a breaker
// (CG002), and a spec file named at the end of the file whose chain has
// the same fault. The analyzer lints the spec files before the calls,
// and reports the findings in the order of their positions all the same.
package bad

import (
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// Chain builds breaker, then retry, then timeout.
func Chain() (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second})
	r, _ := retry.New(retry.MaxAttempts(3))
	t, _ := timeout.New(time.Second)
	return chain.New(
		b,
		r, // want `chain: warning CG002: retry\(3\) is inside breaker`
		t,
	)
}

//callguard:spec ../../specs/flagged.yaml // want `spec ../../specs/flagged.yaml: chain: warning CG002`
