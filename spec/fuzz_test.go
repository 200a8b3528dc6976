package spec_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/callguard/callguard/spec"
)

// Parse never panics, whatever the input: it returns a *spec.Error, or a
// Spec whose Chain and Policies then build. Without -fuzz, the seeds run
// as an ordinary test: the files in testdata and the error cases.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(every))
	f.Add([]byte(everyOverload))
	for _, seed := range []string{
		"", "~", "[]", "{}", "chain: []", "chain: [timeout: 1s]", "chain: &a [*a]",
		"chain:\n  - breaker: &b {consecutiveFailures: 3}\n  - breaker: *b",
		"chain: [{timeout: {timeout: 1s, latency: [{q: .nan, latency: 1ms}]}}]",
		"chain: [{retry: {attempts: 1e300}}]", "chain: [{breaker: {consecutiveFailures: -0x8000000000000000}}]",
		"{\"chain\": [{\"timeout\": \"1s\"}]", "\t{}", "chain: [timeout: !!binary aGk=]",
		"chain: [{hedge: {delay: 1ns, maxDelay: 9223372036854775807ns, burst: 1e18}}]",
		"chain: [{hedge: {delay: 2562047h, quantile: 0.99999, minSamples: 1}}]",
		"chain: [{limit: {algorithm: aimd, maxLimit: 9e18, initialLimit: 9e18, backoffRatio: 0.5}}]",
		"chain: [{limit: {minLimit: 1e9, smoothing: 1e-300, tolerance: 1.7e308, longWindow: 1, shortWindow: 1}}]",
		"chain: [{bulkhead: {maxConcurrent: 9e18, maxQueue: 9e18, maxWait: 1ns}}]",
		"chain: [{throttle: {k: 1, window: 10ns, maxRejectionRate: 1, minRequests: 1}}]",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := spec.Parse(data)
		if err != nil {
			var e *spec.Error
			if !errors.As(err, &e) || err.Error() == "" {
				t.Fatalf("Parse: %v (%T), want a *spec.Error", err, err)
			}
			return
		}
		if _, err := s.Chain(); err != nil {
			t.Fatalf("Parse succeeded but Chain failed: %v", err)
		}
		if _, err := s.Policies(); err != nil {
			t.Fatalf("Parse succeeded but Policies failed: %v", err)
		}
	})
}
