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
	for _, seed := range []string{
		"", "~", "[]", "{}", "chain: []", "chain: [timeout: 1s]", "chain: &a [*a]",
		"chain:\n  - breaker: &b {consecutiveFailures: 3}\n  - breaker: *b",
		"chain: [{timeout: {timeout: 1s, latency: [{q: .nan, latency: 1ms}]}}]",
		"chain: [{retry: {attempts: 1e300}}]", "chain: [{breaker: {consecutiveFailures: -0x8000000000000000}}]",
		"{\"chain\": [{\"timeout\": \"1s\"}]", "\t{}", "chain: [timeout: !!binary aGk=]",
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
