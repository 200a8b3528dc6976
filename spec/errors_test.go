package spec_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/spec"
)

type errorCase struct {
	name string
	src  string
	line int    // of the value at fault
	path string // the field path
	// field, if set, is the breaker.Settings field that breaker.New
	// rejected: the error must unwrap to a *breaker.SettingsError for it.
	field string
}

func checkErrors(t *testing.T, cases []errorCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := spec.Parse([]byte(tc.src))
			if err == nil {
				c, _ := s.Chain()
				t.Fatalf("Parse succeeded (%v), want an error at line %d, %s\n%s", c, tc.line, tc.path, tc.src)
			}
			var e *spec.Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse: %v (%T), want a *spec.Error", err, err)
			}
			t.Log(err)
			if e.Line != tc.line || e.Path != tc.path {
				t.Errorf("Parse: line %d, path %q; want line %d, %q\n  (%v)", e.Line, e.Path, tc.line, tc.path, err)
			}
			want := fmt.Sprintf("spec: line %d: %s: ", tc.line, tc.path)
			if tc.path == "" {
				want = fmt.Sprintf("spec: line %d: ", tc.line)
			}
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Parse: %q, want it to begin with %q", err, want)
			}
			if tc.field != "" {
				var se *breaker.SettingsError
				if !errors.As(err, &se) || se.Field != tc.field {
					t.Errorf("Parse: %v; want a *breaker.SettingsError for %s", err, tc.field)
				}
			}
		})
	}
}

func TestUnknownFields(t *testing.T) {
	checkErrors(t, []errorCase{
		{"top", "chain: [timeout: 1s]\nchains: []", 2, "chains", ""},
		{"lint", "lint:\n  strict: true\n  ignored: [CG013]\nchain: [timeout: 1s]", 3, "lint.ignored", ""},
		{"policy", "chain:\n  - timeout: 1s\n  - ratelimit: {rate: 10}", 3, "chain[1].ratelimit", ""},
		{"retry", "chain:\n  - retry:\n      atempts: 3", 3, "chain[0].retry.atempts", ""},
		{"retry.exponential", "chain:\n  - retry: {exponential: {initial: 1ms, max: 2ms, factor: 3}}", 2, "chain[0].retry.exponential.factor", ""},
		{"retry.budget", "chain:\n  - retry:\n      budget:\n        ratio: 0.1\n        perSecond: 1\n        burst: 5", 6, "chain[0].retry.budget.burst", ""},
		{"breaker, by case", "chain:\n  - breaker:\n      consecutiveFailures: 5\n      OpenTimeout: 1s", 4, "chain[0].breaker.OpenTimeout", ""},
		{"timeout", "chain:\n  - timeout: {timeout: 1s, deadline: 2s}", 2, "chain[0].timeout.deadline", ""},
		{"timeout.latency", "chain:\n  - timeout:\n      timeout: 1s\n      latency:\n        - {q: 0.9, latency: 1ms, p: 3}", 5, "chain[0].timeout.latency[0].p", ""},
		{"timeout.adaptive", "chain:\n  - timeout:\n      timeout: 1s\n      adaptive:\n        percentile: 0.99", 5, "chain[0].timeout.adaptive.percentile", ""},
	})
	_, err := spec.Parse([]byte("chain:\n  - retry: {atempts: 3}"))
	if err == nil || !strings.Contains(err.Error(), `did you mean "attempts"?`) {
		t.Errorf("a misspelt field: %v, want a suggestion of attempts", err)
	}
}

func TestBadValues(t *testing.T) {
	checkErrors(t, []errorCase{
		// The example of the package documentation, on line 7.
		{"5 secs", "lint: {strict: false}\nchain:\n  - timeout: 3500ms\n  - retry: {attempts: 3}\n  - breaker:\n      consecutiveFailures: 10\n      openTimeout: 5 secs", 7, "chain[2].breaker.openTimeout", ""},
		{"negative duration", "chain:\n  - breaker: {consecutiveFailures: 3, openTimeout: -1s}", 2, "chain[0].breaker.openTimeout", ""},
		{"negative timeout", "chain:\n  - timeout: -300ms", 2, "chain[0].timeout", ""},
		{"negative lint duration", "lint:\n  maxDetection: -10s\nchain: [timeout: 1s]", 2, "lint.maxDetection", ""},
		{"negative constant", "chain:\n  - retry: {constant: -5ms}", 2, "chain[0].retry.constant", ""},
		{"negative latency", "chain:\n  - timeout: {timeout: 1s, latency: [{q: 0.9, latency: -1ms}]}", 2, "chain[0].timeout.latency[0].latency", ""},
		{"a number for a duration", "chain:\n  - breaker: {consecutiveFailures: 3, window: 10}", 2, "chain[0].breaker.window", ""},
		{"a list for a duration", "chain:\n  - breaker:\n      consecutiveFailures: 3\n      openTimeout: [1s]", 4, "chain[0].breaker.openTimeout", ""},
		{"a string for a count", "chain:\n  - retry: {attempts: three}", 2, "chain[0].retry.attempts", ""},
		{"a fraction for a count", "chain:\n  - retry: {attempts: 2.5}", 2, "chain[0].retry.attempts", ""},
		{"a count out of range", "chain:\n  - breaker: {consecutiveFailures: 99999999999999999999999}", 2, "chain[0].breaker.consecutiveFailures", ""},
		{"a string for a rate", `{"chain": [{"breaker": {"failureRate": "0.5"}}]}`, 1, "chain[0].breaker.failureRate", ""},
		{"yes for a flag", "lint: {strict: yes}\nchain: [timeout: 1s]", 1, "lint.strict", ""},
		{"a number for a name", "chain:\n  - breaker: {name: 5, consecutiveFailures: 3}", 2, "chain[0].breaker.name", ""},
		{"a scalar for a retry", "chain:\n  - retry: 3", 2, "chain[0].retry", ""},
		{"no value for a retry", "chain:\n  - retry:", 2, "chain[0].retry", ""},
		{"a list for a timeout", "chain:\n  - timeout: [1s]", 2, "chain[0].timeout", ""},
		{"a mapping for the chain", "chain:\n  timeout: 1s", 2, "chain", ""},
		{"a scalar for ignore", "lint: {ignore: CG013}\nchain: [timeout: 1s]", 1, "lint.ignore", ""},
		{"a mapping for latency", "chain:\n  - timeout: {timeout: 1s, latency: {q: 0.9, latency: 1ms}}", 2, "chain[0].timeout.latency", ""},
		{"a list for the spec", "- timeout: 1s", 1, "", ""},
		{"an unknown engine", "chain:\n  - breaker: {consecutiveFailures: 3, engine: gobraker}", 2, "chain[0].breaker.engine", ""},
		{"an unknown lint code", "lint:\n  ignore: [CG013, CG999]\nchain: [timeout: 1s]", 2, "lint.ignore[1]", ""},
		{"both schedules", "chain:\n  - retry:\n      constant: 1s\n      exponential: {initial: 1ms, max: 2ms}", 4, "chain[0].retry.exponential", ""},
		{"exponential without max", "chain:\n  - retry:\n      exponential: {initial: 1ms}", 3, "chain[0].retry.exponential.max", ""},
		{"budget without perSecond", "chain:\n  - retry:\n      budget: {ratio: 0.1}", 3, "chain[0].retry.budget.perSecond", ""},
		{"timeout without timeout", "chain:\n  - timeout:\n      adaptive: {}", 2, "chain[0].timeout.timeout", ""},
		{"latency without q", "chain:\n  - timeout: {timeout: 1s, latency: [{latency: 1ms}]}", 2, "chain[0].timeout.latency[0].q", ""},
		{"a field twice", "chain:\n  - breaker:\n      consecutiveFailures: 3\n      consecutiveFailures: 4", 4, "chain[0].breaker.consecutiveFailures", ""},
		{"a merge key", "chain:\n  - breaker: &b {consecutiveFailures: 3}\n  - breaker:\n      <<: *b\n      name: second", 4, "chain[1].breaker.<<", ""},
		{"a second document", "chain: [timeout: 1s]\n---\n# more\nchain: [timeout: 2s]\n", 4, "", ""},
		{"a value in JSON", "{\n  \"chain\": [\n    {\"breaker\": {\n      \"consecutiveFailures\": 3,\n      \"openTimeout\": \"5 secs\"}}\n  ]\n}", 5, "chain[0].breaker.openTimeout", ""},
	})
}

func TestStructure(t *testing.T) {
	checkErrors(t, []errorCase{
		{"no trip rule", "chain:\n  - breaker: {openTimeout: 1s, halfOpenProbes: 2}", 2, "chain[0].breaker", ""},
		{"no trip rule, empty", "chain:\n  - retry: {}\n  - breaker: {}", 3, "chain[1].breaker", ""},
		{"trip rules off", "chain:\n  - breaker:\n      consecutiveFailures: 0\n      failureRate: 0", 2, "chain[0].breaker", ""},
		{"no policy", "chain:\n  - timeout: 1s\n  - {}", 3, "chain[1]", ""},
		{"two policies", "chain:\n  - timeout: 1s\n    retry: {}", 3, "chain[0]", ""},
		{"a name, not a policy", "chain:\n  - timeout", 2, "chain[0]", ""},
		{"empty chain", "lint: {strict: true}\nchain: []", 2, "chain", ""},
		{"no chain", "lint: {strict: true}", 1, "chain", ""},
		{"fallback", "chain:\n  - fallback: {}\n  - retry: {}", 2, "chain[0].fallback", ""},
	})
	for _, src := range []string{"", "# nothing\n", "~"} {
		_, err := spec.Parse([]byte(src))
		var e *spec.Error
		if !errors.As(err, &e) || !strings.Contains(err.Error(), "empty") {
			t.Errorf("Parse(%q): %v, want an *Error saying the document is empty", src, err)
		}
	}
	for _, src := range []string{"---\nchain: [timeout: 1s]\n...\n", "chain: [timeout: 1s]\n---\n# nothing more\n"} {
		if _, err := spec.Parse([]byte(src)); err != nil {
			t.Errorf("Parse(%q): %v; want the one document read (markers and empty documents are fine)", src, err)
		}
	}
	_, err := spec.Parse([]byte("chain:\n  - fallback: {}"))
	if err == nil || !strings.Contains(err.Error(), "needs code") {
		t.Errorf("a fallback: %v, want an error saying it needs code", err)
	}
	// A syntax error: the parser's message names the line.
	_, err = spec.Parse([]byte("chain:\n  - timeout: 1s\n  - retry: {attempts: 3\n"))
	var e *spec.Error
	if !errors.As(err, &e) || !strings.Contains(err.Error(), "line ") {
		t.Errorf("a syntax error: %v, want an *Error naming the line", err)
	}
}

// The constructors' own errors, wrapped with the line and field of the
// value they rejected.
func TestConstructorErrors(t *testing.T) {
	const b = "chain:\n  - breaker:\n      consecutiveFailures: 3\n"
	checkErrors(t, []errorCase{
		{"breaker ConsecutiveFailures", "chain:\n  - breaker:\n      consecutiveFailures: -1", 3, "chain[0].breaker.consecutiveFailures", "ConsecutiveFailures"},
		{"breaker FailureRate", "chain:\n  - breaker:\n      failureRate: 1.5", 3, "chain[0].breaker.failureRate", "FailureRate"},
		{"breaker SlowCallRate", b + "      slowCall: 1s\n      slowCallRate: .nan", 5, "chain[0].breaker.slowCallRate", "SlowCallRate"},
		{"breaker SlowCall missing", b + "      slowCallRate: 0.5", 2, "chain[0].breaker.slowCall", "SlowCall"},
		{"breaker Window and WindowCalls", b + "      failureRate: 0.5\n      window: 10s\n      windowCalls: 50", 6, "chain[0].breaker.windowCalls", "WindowCalls"},
		{"breaker WindowCalls negative", b + "      windowCalls: -5", 4, "chain[0].breaker.windowCalls", "WindowCalls"},
		{"breaker Window unused", b + "      window: 10s", 4, "chain[0].breaker.window", "Window"},
		{"breaker Window too short", b + "      failureRate: 0.5\n      window: 5ns", 5, "chain[0].breaker.window", "Window"},
		{"breaker MinCalls over WindowCalls", b + "      failureRate: 0.5\n      windowCalls: 10\n      minCalls: 20", 6, "chain[0].breaker.minCalls", "MinCalls"},
		{"breaker MinCalls negative", b + "      minCalls: -1", 4, "chain[0].breaker.minCalls", "MinCalls"},
		{"breaker MaxOpenTimeout", b + "      openTimeout: 10s\n      maxOpenTimeout: 5s", 5, "chain[0].breaker.maxOpenTimeout", "MaxOpenTimeout"},
		{"breaker HalfOpenProbes", b + "      halfOpenProbes: -2", 4, "chain[0].breaker.halfOpenProbes", "HalfOpenProbes"},
		{"breaker HalfOpenSuccesses", b + "      halfOpenProbes: 2\n      halfOpenSuccesses: 3", 5, "chain[0].breaker.halfOpenSuccesses", "HalfOpenSuccesses"},
		{"breaker SkipHalfOpen", b + "      halfOpenProbes: 2\n      skipHalfOpen: true", 5, "chain[0].breaker.skipHalfOpen", "SkipHalfOpen"},
		{"breaker gobreaker", b + "      engine: gobreaker\n      maxOpenTimeout: 1m", 5, "chain[0].breaker.maxOpenTimeout", "MaxOpenTimeout"},
		{"breaker gobreaker successes", b + "      engine: gobreaker\n      halfOpenSuccesses: 1", 5, "chain[0].breaker.halfOpenSuccesses", "HalfOpenSuccesses"},

		{"retry attempts 0", "chain:\n  - retry: {attempts: 0}", 2, "chain[0].retry.attempts", ""},
		{"retry attempts over the limit", "chain:\n  - retry:\n      attempts: 10001", 3, "chain[0].retry.attempts", ""},
		{"retry exponential", "chain:\n  - retry:\n      exponential: {initial: 1s, max: 100ms}", 3, "chain[0].retry.exponential", ""},
		{"retry jitter", "chain:\n  - retry:\n      jitter: 1.5", 3, "chain[0].retry.jitter", ""},
		{"retry budget ratio", "chain:\n  - retry:\n      budget:\n        ratio: 2\n        perSecond: 1", 4, "chain[0].retry.budget.ratio", ""},
		{"retry budget perSecond", "chain:\n  - retry:\n      budget:\n        ratio: 0.1\n        perSecond: -1", 5, "chain[0].retry.budget.perSecond", ""},
		{"retry budget infinite", "chain:\n  - retry:\n      budget: {ratio: 0.1, perSecond: .inf}", 3, "chain[0].retry.budget.perSecond", ""},

		{"timeout 0", "chain:\n  - timeout: 0s", 2, "chain[0].timeout", ""},
		{"timeout 0 in a mapping", "chain:\n  - timeout:\n      timeout: 0", 3, "chain[0].timeout.timeout", ""},
		{"timeout latency q 0", "chain:\n  - timeout:\n      timeout: 1s\n      latency:\n        - {q: 0, latency: 1ms}", 5, "chain[0].timeout.latency[0].q", ""},
		{"timeout latency q over 1", "chain:\n  - timeout:\n      timeout: 1s\n      latency: [{q: 1.5, latency: 1ms}]", 4, "chain[0].timeout.latency[0].q", ""},
		{"timeout latency 0", "chain:\n  - timeout:\n      timeout: 1s\n      latency: [{q: 0.9, latency: 0s}]", 4, "chain[0].timeout.latency[0].latency", ""},
		{"timeout latency twice", "chain:\n  - timeout:\n      timeout: 1s\n      latency: [{q: 0.9, latency: 1ms}, {q: 0.9, latency: 2ms}]", 4, "chain[0].timeout.latency", ""},
		{"timeout latency faster", "chain:\n  - timeout:\n      timeout: 1s\n      latency: [{q: 0.9, latency: 10ms}, {q: 0.99, latency: 2ms}]", 4, "chain[0].timeout.latency", ""},
		{"adaptive quantile", "chain:\n  - timeout:\n      timeout: 1s\n      adaptive:\n        quantile: 1.5", 5, "chain[0].timeout.adaptive.quantile", ""},
		{"adaptive multiplier", "chain:\n  - timeout:\n      timeout: 1s\n      adaptive:\n        multiplier: 0.5", 5, "chain[0].timeout.adaptive.multiplier", ""},
		{"adaptive max under the default min", "chain:\n  - timeout:\n      timeout: 1s\n      adaptive:\n        max: 10ms", 5, "chain[0].timeout.adaptive.max", ""},
		{"adaptive max under min", "chain:\n  - timeout:\n      timeout: 1s\n      adaptive:\n        min: 500ms\n        max: 400ms", 4, "chain[0].timeout.adaptive", ""},
		{"adaptive window", "chain:\n  - timeout:\n      timeout: 1s\n      adaptive: {window: 3ns}", 4, "chain[0].timeout.adaptive.window", ""},
		{"adaptive minSamples", "chain:\n  - timeout:\n      timeout: 1s\n      adaptive: {minSamples: -1}", 4, "chain[0].timeout.adaptive.minSamples", ""},

		// chain.Options.New: a finding of severity Error (strict mode).
		{"strict lint", "lint: {strict: true}\nchain:\n  - breaker: {consecutiveFailures: 5}\n  - retry: {attempts: 3}\n  - timeout: 1s", 2, "chain", ""},
	})
	// The lint is the chain's: without strict the same chain is built, and
	// its warning kept.
	s, err := spec.Parse([]byte("chain:\n  - breaker: {consecutiveFailures: 5}\n  - retry: {attempts: 3}\n  - timeout: 1s"))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.Chain(); err != nil || len(c.Findings()) == 0 {
		t.Errorf("retry inside a breaker, not strict: %v, %v; want a chain with findings", c, err)
	}
}

// TestLintErrorReadsOnce: a lint error of the chain (strict mode) reads
// "spec: line 2: chain: error CG002: …", one line per finding, the
// package's "chain:" not repeated after the field's (it read "chain:
// chain: error CG002"), and errors.As still finds each chain.Finding.
func TestLintErrorReadsOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		src   string
		codes []string
	}{
		{"one", "lint: {strict: true}\nchain:\n  - breaker: {consecutiveFailures: 5}\n  - retry: {attempts: 3}\n  - timeout: 1s", []string{"CG002"}},
		{"two", "lint: {strict: true, ignore: [CG015]}\nchain:\n  - timeout: 1s\n  - breaker: {consecutiveFailures: 5}\n  - retry: {attempts: 3}", []string{"CG002", "CG009"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := spec.Parse([]byte(tc.src))
			var f chain.Finding
			if !errors.As(err, &f) || f.Code != tc.codes[0] {
				t.Fatalf("Parse: %v; want a chain.Finding %s", err, tc.codes[0])
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.codes) {
				t.Fatalf("Parse: %d lines, want %d:\n%v", len(lines), len(tc.codes), err)
			}
			for i, code := range tc.codes {
				if want := "spec: line 2: chain: error " + code + ": "; !strings.HasPrefix(lines[i], want) {
					t.Errorf("line %d: %q, want it to begin with %q", i+1, lines[i], want)
				}
			}
		})
	}
}
