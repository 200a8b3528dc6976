package spec_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/spec"
)

func ExampleParse() {
	s, err := spec.Parse([]byte(`
lint: {strict: true}
chain:                          # outermost first
  - timeout: 3500ms             # overall
  - retry: {attempts: 3, exponential: {initial: 100ms, max: 1s}}
  - breaker: {name: payments, consecutiveFailures: 5, openTimeout: 1s}
  - timeout: {timeout: 300ms, latency: [{q: 0.99, latency: 120ms}]}  # per attempt
`))
	if err != nil {
		panic(err)
	}
	c, err := s.Chain()
	if err != nil {
		panic(err)
	}
	fmt.Println(c)
	fmt.Println(len(c.Findings()), "findings")
	// Output:
	// timeout(3.5s) → retry(3) → breaker payments(5 consecutive, open 1s, 3 probes) → timeout(300ms)
	// 0 findings
}

// Errors name the line and the field.
func ExampleParse_error() {
	_, err := spec.Parse([]byte(`
chain:
  - retry: {attempts: 3}
  - breaker:
      consecutiveFailures: 10
      openTimeout: 5 secs
`))
	fmt.Println(err)
	var e *spec.Error
	if errors.As(err, &e) {
		fmt.Println(e.Line, e.Path)
	}
	// Output:
	// spec: line 6: chain[1].breaker.openTimeout: "5 secs" is not a duration (Go syntax: 300ms, 1.5s, 2m)
	// 6 chain[1].breaker.openTimeout
}

// The chain the protection benchmark judged best, from a file.
func ExampleLoad() {
	s, err := spec.Load("testdata/example.yaml")
	if err != nil {
		panic(err)
	}
	c, err := s.Chain()
	if err != nil {
		panic(err)
	}
	fmt.Println(c)
	// Output:
	// retry(3) → breaker(10 consecutive or 50% of 10s, open 1s, 2 of 3 probes) → timeout(adaptive 300ms)
}

// A fallback needs code, so it cannot be in the file: put it outermost in
// code, around the file's policies.
func ExampleSpec_Policies() {
	s, err := spec.Load("testdata/example.yaml")
	if err != nil {
		panic(err)
	}
	ps, err := s.Policies()
	if err != nil {
		panic(err)
	}
	fb, err := fallback.New(func(ctx context.Context, err error) error {
		return nil // answer from a cache
	})
	if err != nil {
		panic(err)
	}
	c, err := s.Options().New(append([]chain.Policy{fb}, ps...)...)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(c.Policies()), "policies")
	// Output:
	// 4 policies
}
