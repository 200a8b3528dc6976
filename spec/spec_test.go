package spec_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/spec"
	"github.com/callguard/callguard/timeout"
)

func load(t *testing.T, path string) *spec.Spec {
	t.Helper()
	s, err := spec.Load(path)
	if err != nil {
		t.Fatalf("Load(%q): %v", path, err)
	}
	return s
}

func parse(t *testing.T, src string) *spec.Spec {
	t.Helper()
	s, err := spec.Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, src)
	}
	return s
}

func build(t *testing.T, s *spec.Spec) *chain.Chain {
	t.Helper()
	c, err := s.Chain()
	if err != nil {
		t.Fatalf("Chain: %v", err)
	}
	return c
}

func describe(ps []chain.Policy) []string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprint(p))
	}
	return out
}

// The YAML and the JSON file of one chain give the same chain: the same
// order and settings, the same findings, the same policies.
func TestYAMLAndJSONGiveEqualChains(t *testing.T) {
	y, j := load(t, "testdata/example.yaml"), load(t, "testdata/example.json")
	cy, cj := build(t, y), build(t, j)
	if got, want := cj.String(), cy.String(); got != want {
		t.Errorf("JSON chain = %s, want %s (YAML)", got, want)
	}
	if got, want := cj.Findings(), cy.Findings(); !reflect.DeepEqual(got, want) {
		t.Errorf("JSON findings = %v, want %v (YAML)", got, want)
	}
	py, err := y.Policies()
	if err != nil {
		t.Fatal(err)
	}
	pj, err := j.Policies()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := describe(pj), describe(py); !slices.Equal(got, want) {
		t.Errorf("JSON policies = %q, want %q (YAML)", got, want)
	}
	for i := range py {
		if a, ok := py[i].(*breaker.Breaker); ok {
			if got, want := pj[i].(*breaker.Breaker).Settings(), a.Settings(); !reflect.DeepEqual(got, want) {
				t.Errorf("JSON breaker settings = %+v, want %+v", got, want)
			}
		}
	}
	if got, want := j.Options(), y.Options(); !reflect.DeepEqual(got, want) {
		t.Errorf("JSON options = %+v, want %+v", got, want)
	}
}

// testdata/example.yaml is the README's recommended chain, built in Go.
func TestExampleIsTheRecommendedChain(t *testing.T) {
	r, _ := retry.New(retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second), retry.FitDeadline())
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 10, ConsecutiveFor: 500 * time.Millisecond, OpenTimeout: 800 * time.Millisecond, HalfOpenSuccesses: 2})
	attempt, _ := timeout.New(300*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{
		Quantile: 0.99, Window: 5 * time.Second, Max: time.Second,
	}))
	want, err := chain.New(r, b, attempt)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"testdata/example.yaml", "testdata/example.json"} {
		s := load(t, f)
		c := build(t, s)
		if got := c.String(); got != want.String() {
			t.Errorf("%s: chain = %s, want %s", f, got, want)
		}
		ps := c.Policies()
		if got := ps[1].(*breaker.Breaker).Settings(); !reflect.DeepEqual(got, b.Settings()) {
			t.Errorf("%s: breaker settings = %+v, want %+v", f, got, b.Settings())
		}
		if got := bridge.RetryOf(ps[0].(*retry.Policy)).Waits(); !slices.Equal(got, bridge.RetryOf(r).Waits()) {
			t.Errorf("%s: waits = %v, want %v", f, got, bridge.RetryOf(r).Waits())
		}
		lo, hi := tbounds(ps[2].(*timeout.Policy))
		if wlo, whi := tbounds(attempt); lo != wlo || hi != whi {
			t.Errorf("%s: adaptive bounds = [%v, %v], want [%v, %v]", f, lo, hi, wlo, whi)
		}
	}
}

// every sets every setting a file can hold, each to a value other than its
// default.
const every = `
lint: {strict: false, ignore: [CG013, CG009], maxDetection: 12s, downstreamRecovery: 20s}
chain:
  - timeout: 3500ms
  - retry:
      attempts: 4
      exponential: {initial: 50ms, max: 150ms}
      jitter: 0
      budget: {ratio: 0.25, perSecond: 2}
      maxPushback: 1s
      retryWhenOpen: true
      fitDeadline: true
      retryRejected: true
  - retry: {attempts: 3, constant: 100ms, jitter: 0.5}
  - breaker:
      name: payments
      consecutiveFailures: 7
      failureRate: 0.4
      window: 20s
      minCalls: 30
      slowCall: 2s
      slowCallRate: 0.8
      openTimeout: 2s
      maxOpenTimeout: 40s
      halfOpenProbes: 5
      halfOpenSuccesses: 4
      engine: native
  - breaker: {name: counted, failureRate: 0.6, windowCalls: 50, minCalls: 25, skipHalfOpen: true}
  - breaker: {name: gb, consecutiveFailures: 6, halfOpenProbes: 2, engine: gobreaker}
  - timeout:
      timeout: 400ms
      latency: [{q: 0.5, latency: 80ms}, {q: 0.99, latency: 250ms}]
      adaptive: {quantile: 0.95, multiplier: 2, window: 30s, max: 2s, min: 40ms, minSamples: 50}
`

// Every setting of the file reaches the policy built from it.
func TestEverySetting(t *testing.T) {
	s := parse(t, every)
	wantOpts := chain.Options{Ignore: []string{"CG013", "CG009"}, MaxDetection: 12 * time.Second, DownstreamRecovery: 20 * time.Second}
	if got := s.Options(); !reflect.DeepEqual(got, wantOpts) {
		t.Errorf("Options() = %+v, want %+v", got, wantOpts)
	}
	if got := parse(t, "lint: {strict: true}\nchain: [timeout: 1s]").Options(); !got.Strict {
		t.Errorf("lint.strict: true gives Options().Strict = false")
	}
	ps, err := s.Policies()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 7 {
		t.Fatalf("%d policies, want 7: %q", len(ps), describe(ps))
	}

	if got := ps[0].(*timeout.Policy); got.Timeout() != 3500*time.Millisecond || bridge.TimeoutOf(got).Adaptive || len(bridge.TimeoutOf(got).Declared) != 0 {
		t.Errorf("chain[0] = %v (adaptive %v, declared %v), want a fixed 3.5s timeout", got, bridge.TimeoutOf(got).Adaptive, bridge.TimeoutOf(got).Declared)
	}

	r := ps[1].(*retry.Policy)
	if got, want := bridge.RetryOf(r).Waits(), []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond}; r.Attempts() != 4 || !slices.Equal(got, want) {
		t.Errorf("chain[1]: %d attempts, waits %v; want 4, %v", r.Attempts(), got, want)
	}
	if !bridge.RetryOf(r).WhenOpen {
		t.Errorf("chain[1]: RetriesWhenOpen() = false, want true")
	}
	if !bridge.RetryOf(r).Fit {
		t.Errorf("chain[1]: fitDeadline: true gave a retry without FitDeadline")
	}
	if !strings.Contains(r.String(), "RetryRejected") {
		t.Errorf("chain[1] = %v: retryRejected: true gave a retry without RetryRejected", r)
	}
	if ratio, perSecond, _, ok := bridge.RetryBudget(r); !ok || ratio != 0.25 || perSecond != 2 {
		t.Errorf("chain[1]: budget = %v, %v (ok %v), want 0.25, 2", ratio, perSecond, ok)
	}
	r2 := ps[2].(*retry.Policy)
	if got, want := bridge.RetryOf(r2).Waits(), []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}; r2.String() != "retry(3)" || !slices.Equal(got, want) {
		t.Errorf("chain[2] = %v, waits %v; want retry(3), %v", r2, got, want)
	}
	if bridge.RetryOf(r2).WhenOpen || bridge.RetryOf(r2).Fit {
		t.Errorf("chain[2]: RetryWhenOpen %t, FitDeadline %t; want neither", bridge.RetryOf(r2).WhenOpen, bridge.RetryOf(r2).Fit)
	}
	if _, _, _, ok := bridge.RetryBudget(r2); ok {
		t.Errorf("chain[2] has a budget, want none")
	}

	wantBreakers := []breaker.Settings{{
		Name: "payments", ConsecutiveFailures: 7, FailureRate: 0.4, Window: 20 * time.Second, MinCalls: 30,
		SlowCall: 2 * time.Second, SlowCallRate: 0.8, OpenTimeout: 2 * time.Second, MaxOpenTimeout: 40 * time.Second,
		HalfOpenProbes: 5, HalfOpenSuccesses: 4, Engine: breaker.EngineNative,
	}, {
		Name: "counted", FailureRate: 0.6, WindowCalls: 50, MinCalls: 25, SkipHalfOpen: true,
		OpenTimeout: breaker.DefaultOpenTimeout,
	}, {
		Name: "gb", ConsecutiveFailures: 6, HalfOpenProbes: 2, HalfOpenSuccesses: 2,
		OpenTimeout: breaker.DefaultOpenTimeout, Engine: breaker.EngineGobreaker,
	}}
	for i, want := range wantBreakers {
		if got := ps[3+i].(*breaker.Breaker).Settings(); !reflect.DeepEqual(got, want) {
			t.Errorf("chain[%d] settings = %+v, want %+v", 3+i, got, want)
		}
	}

	tp := ps[6].(*timeout.Policy)
	if got := tp.Timeout(); got != 400*time.Millisecond || !bridge.TimeoutOf(tp).Adaptive {
		t.Errorf("chain[6]: timeout %v, adaptive %v; want 400ms, adaptive", got, bridge.TimeoutOf(tp).Adaptive)
	}
	if got, want := bridge.TimeoutOf(tp).Declared, []bridge.Quantile{{Q: 0.5, Latency: 80 * time.Millisecond}, {Q: 0.99, Latency: 250 * time.Millisecond}}; !slices.Equal(got, want) {
		t.Errorf("chain[6]: declared %v, want %v", got, want)
	}
	if lo, hi := tbounds(tp); lo != 40*time.Millisecond || hi != 2*time.Second {
		t.Errorf("chain[6]: adaptive bounds [%v, %v], want [40ms, 2s]", lo, hi)
	}
	// For an adaptive timeout without samples or declared latencies, the
	// patience the chain's lint uses is the timeout over its Multiplier.
	// (Quantile, Window and MinSamples: TestTimeoutArgs.)
	ps, err = parse(t, "chain: [timeout: {timeout: 400ms, adaptive: {multiplier: 2}}]").Policies()
	if err != nil {
		t.Fatal(err)
	}
	if got := bridge.TimeoutPatience(ps[0]); got != 200*time.Millisecond {
		t.Errorf("adaptive multiplier 2 from 400ms: patience %v, want 200ms", got)
	}
}

// jitter and maxPushback, which no getter shows, act as the file says:
// jitter 0 gives exact waits and 0.5 varies them; a server asking for
// more than maxPushback ends the retries.
func TestRetryJitterAndPushback(t *testing.T) {
	fail := errors.New("unavailable")
	waits := func(r *retry.Policy) []time.Duration {
		var at []time.Time
		_ = r.Do(context.Background(), func(context.Context) error {
			at = append(at, time.Now())
			return fail
		})
		var w []time.Duration
		for i := 1; i < len(at); i++ {
			w = append(w, at[i].Sub(at[i-1]))
		}
		return w
	}
	synctest.Test(t, func(t *testing.T) {
		ps, err := parse(t, every).Policies()
		if err != nil {
			t.Fatal(err)
		}
		exact, jittered := ps[1].(*retry.Policy), ps[2].(*retry.Policy)
		if got, want := waits(exact), bridge.RetryOf(exact).Waits(); !slices.Equal(got, want) {
			t.Errorf("jitter 0: waits %v, want exactly %v", got, want)
		}
		varied := false
		for range 10 {
			for _, w := range waits(jittered) {
				if w < 50*time.Millisecond || w > 150*time.Millisecond {
					t.Fatalf("jitter 0.5 of 100ms: wait %v, want within [50ms, 150ms]", w)
				}
				varied = varied || w != 100*time.Millisecond
			}
		}
		if !varied {
			t.Errorf("jitter 0.5: every wait was exactly 100ms")
		}

		calls := 0
		err = exact.Do(context.Background(), func(context.Context) error {
			calls++
			return retry.WithPushback(fail, 2*time.Second)
		})
		var ex *retry.ExhaustedError
		if !errors.As(err, &ex) || ex.Reason != retry.ReasonPushback || calls != 1 {
			t.Errorf("pushback 2s over maxPushback 1s: %d calls, %v; want 1 call, %v", calls, err, retry.ReasonPushback)
		}
		calls = 0
		_ = exact.Do(context.Background(), func(context.Context) error {
			calls++
			return retry.WithPushback(fail, 500*time.Millisecond)
		})
		if calls != 4 {
			t.Errorf("pushback 500ms under maxPushback 1s: %d calls, want 4", calls)
		}
	})
}

// Each Chain call builds new policies: tripping one chain's breaker
// leaves the other's closed.
func TestChainsAreIndependent(t *testing.T) {
	s := parse(t, `
chain:
  - retry: {attempts: 2, constant: 0s, budget: {ratio: 0.1, perSecond: 1}}
  - breaker: {consecutiveFailures: 1, openTimeout: 1m}
  - timeout: {timeout: 1s, adaptive: {}}
`)
	c1, c2 := build(t, s), build(t, s)
	p1, p2 := c1.Policies(), c2.Policies()
	for i := range p1 {
		if p1[i] == p2[i] {
			t.Errorf("policy %d (%v) is shared by two chains", i, p1[i])
		}
	}
	ps, err := s.Policies()
	if err != nil {
		t.Fatal(err)
	}
	for i := range ps {
		if ps[i] == p1[i] || ps[i] == p2[i] {
			t.Errorf("Policies()[%d] is shared with a chain", i)
		}
	}
	err = c1.Do(context.Background(), func(context.Context) error { return errors.New("down") })
	if err == nil {
		t.Fatal("a failing call succeeded")
	}
	b1, b2 := p1[1].(*breaker.Breaker), p2[1].(*breaker.Breaker)
	if b1.State() != breaker.StateOpen || b2.State() != breaker.StateClosed {
		t.Fatalf("after a failure in chain 1: breakers %v and %v, want open and closed", b1.State(), b2.State())
	}
	called := false
	if err := c2.Do(context.Background(), func(context.Context) error { called = true; return nil }); err != nil || !called {
		t.Errorf("chain 2 after chain 1 opened: called %v, %v; want called, nil", called, err)
	}
	if b := ps[1].(*breaker.Breaker); b.State() != breaker.StateClosed {
		t.Errorf("Policies()' breaker is %v, want closed", b.State())
	}
}

// Options returns a copy: changing it changes nothing in the Spec.
func TestOptionsIsACopy(t *testing.T) {
	s := parse(t, "lint: {ignore: [CG013]}\nchain: [timeout: 1s]")
	o := s.Options()
	o.Ignore[0] = "CG001"
	if got := s.Options().Ignore; !slices.Equal(got, []string{"CG013"}) {
		t.Errorf("after changing a copy, Options().Ignore = %v, want [CG013]", got)
	}
}

// A Spec not from Parse or Load has no policies, and says so.
func TestZeroSpec(t *testing.T) {
	for _, s := range []*spec.Spec{nil, {}} {
		if _, err := s.Chain(); err == nil {
			t.Errorf("%#v.Chain(): no error", s)
		}
		if _, err := s.Policies(); err == nil {
			t.Errorf("%#v.Policies(): no error", s)
		}
		if got := s.Options(); !reflect.DeepEqual(got, chain.Options{}) {
			t.Errorf("%#v.Options() = %+v, want the zero Options", s, got)
		}
	}
	if got := (&spec.Error{}).Error(); got != "spec: invalid" {
		t.Errorf("zero Error reads %q", got)
	}
}

// Load's errors name the file, with the line.
func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "my.yaml")
	if err := os.WriteFile(path, []byte("chain:\n  - timeout: 5 secs\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := spec.Load(path)
	var e *spec.Error
	if !errors.As(err, &e) || e.File != path || e.Line != 2 || e.Path != "chain[0].timeout" {
		t.Fatalf("Load: %v; want an *Error for %s, line 2, chain[0].timeout", err, path)
	}
	if want := path + ":2: chain[0].timeout: "; !strings.Contains(err.Error(), want) {
		t.Errorf("Load: %q, want it to contain %q", err, want)
	}
	missing := filepath.Join(t.TempDir(), "none.yaml")
	if _, err := spec.Load(missing); err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load of a missing file: %v; want an error naming %s, matching os.ErrNotExist", err, missing)
	}
	if err := os.WriteFile(path, []byte("chain: [timeout: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := spec.Load(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Load of a file with a syntax error: %v; want it to name %s", err, path)
	}
}

// tbounds returns an adaptive timeout's bounds.
func tbounds(p *timeout.Policy) (lo, hi time.Duration) {
	x := bridge.TimeoutOf(p)
	return x.Min, x.Max
}
