package spec_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
	// retry(3, FitDeadline) → breaker(10 consecutive over 500ms, open 800ms, 2 of 3 probes) → timeout(adaptive 300ms)
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

// The overload policies, in their canonical places between the retry and
// the breaker.
func ExampleParse_overload() {
	s, err := spec.Parse([]byte(`
chain:                          # outermost first
  - retry: {attempts: 3, budget: {ratio: 0.1, perSecond: 10}}
  - throttle: {k: 2}
  - hedge: {delay: 20ms, quantile: 0.95}
  - limit: {algorithm: gradient2, maxLimit: 100, maxQueue: 10, maxWait: 50ms}
  - breaker: {consecutiveFailures: 5, openTimeout: 1s}
  - timeout: 300ms              # per attempt
`))
	if err != nil {
		panic(err)
	}
	c, err := s.Chain()
	if err != nil {
		panic(err)
	}
	fmt.Println(strings.ReplaceAll(c.String(), " → ", "\n→ "))
	// Output:
	// retry(3)
	// → throttle(K 2, window 1m0s, max 90%, min 20 requests)
	// → hedge(after p95, from 20ms; ≤ 1 hedge; budget 5 %)
	// → limit(Gradient2(smoothing 0.2, queue 4, tolerance 1.5, long window 600, deadline share 0.5), limit 20 in [1, 100], queue 10 for at most 50ms)
	// → breaker(5 consecutive, open 1s, 3 probes)
	// → timeout(300ms)
}
