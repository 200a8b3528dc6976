package spec_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/callguard/callguard/spec"
)

// A file with an error in every part: each is reported, in the file's
// order, with its line, field and suggestion (issue 22: only the first
// was).
const manyErrors = `lint:
  maxDetection: 10 secs
chain:
  - retry:
      atempts: 3
      jitter: 2
  - circuitBreaker: {consecutiveFailures: 5}
  - breaker:
      consecutiveFailures: 5
      openTimout: 1s
  - timeout: 300 ms
`

// TestAllErrors: Parse and Load report every error of the file, each an
// *spec.Error with its line and field, one line each; errors.As finds the
// first.
func TestAllErrors(t *testing.T) {
	want := []struct {
		line int
		path string
		says string
	}{
		{2, "lint.maxDetection", `"10 secs" is not a duration`},
		{5, "chain[0].retry.atempts", `did you mean "attempts"?`},
		{6, "chain[0].retry.jitter", "jitter"},
		{7, "chain[1].circuitBreaker", `did you mean "breaker"?`},
		{10, "chain[2].breaker.openTimout", `did you mean "openTimeout"?`},
		{11, "chain[3].timeout", `"300 ms" is not a duration`},
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "chain.yaml")
	if err := os.WriteFile(file, []byte(manyErrors), 0o644); err != nil {
		t.Fatal(err)
	}
	_, perr := spec.Parse([]byte(manyErrors))
	_, lerr := spec.Load(file)
	for _, tc := range []struct {
		name string
		err  error
		file string
	}{{"Parse", perr, ""}, {"Load", lerr, file}} {
		t.Run(tc.name, func(t *testing.T) {
			list, ok := tc.err.(interface{ Unwrap() []error })
			if !ok {
				t.Fatalf("%v (%T): want every error of the file", tc.err, tc.err)
			}
			errs := list.Unwrap()
			if len(errs) != len(want) {
				t.Fatalf("%d errors, want %d:\n%v", len(errs), len(want), tc.err)
			}
			lines := strings.Split(tc.err.Error(), "\n")
			if len(lines) != len(want) {
				t.Errorf("%d lines, want one per error:\n%v", len(lines), tc.err)
			}
			for i, w := range want {
				var e *spec.Error
				if !errors.As(errs[i], &e) {
					t.Fatalf("error %d: %v (%T), want a *spec.Error", i, errs[i], errs[i])
				}
				if e.Line != w.line || e.Path != w.path || e.File != tc.file || !strings.Contains(e.Error(), w.says) {
					t.Errorf("error %d: %s:%d %s: %v; want %s:%d %s, saying %q", i, e.File, e.Line, e.Path, e, tc.file, w.line, w.path, w.says)
				}
				if i < len(lines) && lines[i] != e.Error() {
					t.Errorf("line %d: %q, want %q", i+1, lines[i], e.Error())
				}
			}
			var first *spec.Error
			if !errors.As(tc.err, &first) || first.Line != want[0].line {
				t.Errorf("errors.As: %v, want the first error (line %d)", first, want[0].line)
			}
		})
	}
}

// TestUnknownPolicySuggestion: an unknown policy's name gets the nearest
// known one, however far it is.
func TestUnknownPolicySuggestion(t *testing.T) {
	for name, want := range map[string]string{
		"ratelimit":      "limit",
		"circuitBreaker": "breaker",
		"retries":        "retry",
		"Bulkheads":      "bulkhead",
		"timeLimiter":    "timeout",
		"hedging":        "hedge",
		"throtle":        "throttle",
		"xyz":            "",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := spec.Parse([]byte("chain:\n  - " + name + ": {}\n"))
			var e *spec.Error
			if !errors.As(err, &e) || e.Line != 2 || e.Path != "chain[0]."+name {
				t.Fatalf("Parse: %v; want an *Error at line 2, chain[0].%s", err, name)
			}
			got := ""
			if _, after, ok := strings.Cut(err.Error(), `(did you mean "`); ok {
				got, _, _ = strings.Cut(after, `"`)
			}
			if want == "" {
				want = got // any nearest name will do, as long as there is one
				if got == "" {
					t.Errorf("Parse: %v; want a suggestion", err)
				}
			}
			if got != want {
				t.Errorf("Parse: %v; want the suggestion %q", err, want)
			}
		})
	}
}

// TestCallerDeadline: lint.callerDeadline is chain.Options.CallerDeadline,
// with which the lint says (CG004) that the callers' deadline cuts every
// hung attempt before it counts.
func TestCallerDeadline(t *testing.T) {
	s, err := spec.Parse([]byte("lint: {callerDeadline: 1s}\nchain:\n  - retry: {attempts: 5}\n  - breaker: {failureRate: 0.5}\n  - timeout: 10s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Options().CallerDeadline.String(); got != "1s" {
		t.Errorf("Options().CallerDeadline = %s, want 1s", got)
	}
	c, err := s.Chain()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range c.Findings() {
		found = found || f.Code == "CG004" && strings.Contains(f.Message, "never opens")
	}
	if !found {
		t.Errorf("findings %v; want CG004 saying the breaker never opens", c.Findings())
	}
	checkErrors(t, []errorCase{{"negative callerDeadline", "lint:\n  callerDeadline: -1s\nchain: [timeout: 1s]", 2, "lint.callerDeadline", ""}})
}
