package spec_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/spec"
	"github.com/callguard/callguard/throttle"
)

// everyOverload sets every setting of the overload policies a file can
// hold, each to a value other than its default.
const everyOverload = `
chain:
  - throttle: {k: 3, window: 30s, maxRejectionRate: 0.5, minRequests: 40}
  - hedge:
      delay: 30ms
      quantile: 0.9
      window: 20s
      minSamples: 50
      minDelay: 5ms
      maxDelay: 100ms
      maxHedges: 2
      budget: 0.1
      burst: 10
  - limit:
      algorithm: gradient2
      initialLimit: 30
      minLimit: 5
      maxLimit: 150
      maxQueue: 8
      maxWait: 40ms
      smoothing: 0.5
      queueSize: 6
      tolerance: 2
      longWindow: 300
      shortWindow: 5
      deadlineShare: 0.4
  - limit: {algorithm: aimd, initialLimit: 10, minLimit: 2, maxLimit: 50, backoffRatio: 0.75}
  - bulkhead: {maxConcurrent: 12, maxQueue: 6, maxWait: 25ms}
  - timeout: 300ms
`

// Every setting of the file reaches the policy built from it.
func TestOverloadSettings(t *testing.T) {
	ps, err := parse(t, everyOverload).Policies()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 6 {
		t.Fatalf("%d policies, want 6: %q", len(ps), describe(ps))
	}
	wantThrottle := throttle.Settings{K: 3, Window: 30 * time.Second, MaxRejectionRate: 0.5, MinRequests: 40}
	if got := ps[0].(*throttle.Throttle).Settings(); !reflect.DeepEqual(got, wantThrottle) {
		t.Errorf("chain[0] settings = %+v, want %+v", got, wantThrottle)
	}
	// The hedge has no Settings getter: TestOverloadArgs checks them all.
	h := ps[1].(*hedge.Policy)
	if got, want := h.String(), "hedge(after p90, from 30ms; ≤ 2 hedge; budget 10 %)"; got != want || h.Delay() != 30*time.Millisecond {
		t.Errorf("chain[1] = %s, delay %v; want %s, 30ms", got, h.Delay(), want)
	}
	wantLimits := []limit.Settings{{
		Algorithm: limit.Gradient2(limit.Gradient2Settings{
			Smoothing: 0.5, QueueSize: 6, Tolerance: 2, LongWindow: 300, ShortWindow: 5, DeadlineShare: 0.4,
		}),
		InitialLimit: 30, MinLimit: 5, MaxLimit: 150, MaxQueue: 8, MaxWait: 40 * time.Millisecond,
	}, {
		Algorithm:    limit.AIMD(limit.AIMDSettings{BackoffRatio: 0.75}),
		InitialLimit: 10, MinLimit: 2, MaxLimit: 50,
	}}
	for i, want := range wantLimits {
		if got := ps[2+i].(*limit.Limiter).Settings(); !reflect.DeepEqual(got, want) {
			t.Errorf("chain[%d] settings = %+v, want %+v", 2+i, got, want)
		}
	}
	wantBulkhead := limit.BulkheadSettings{MaxConcurrent: 12, MaxQueue: 6, MaxWait: 25 * time.Millisecond}
	if got := ps[4].(*limit.Bulkhead).Settings(); got != wantBulkhead {
		t.Errorf("chain[4] settings = %+v, want %+v", got, wantBulkhead)
	}
}

// A field left out takes the Go API's default: the policies are those of
// the Go constructors with the zero value in each field the file omits.
func TestOverloadDefaults(t *testing.T) {
	ps, err := parse(t, `
chain:
  - throttle: {}
  - hedge: {delay: 20ms}
  - limit: {}
  - limit: {algorithm: aimd}
  - bulkhead: {maxConcurrent: 1}
`).Policies()
	if err != nil {
		t.Fatal(err)
	}
	th, _ := throttle.New(throttle.Settings{})
	if got, want := ps[0].(*throttle.Throttle).Settings(), th.Settings(); !reflect.DeepEqual(got, want) {
		t.Errorf("throttle: {} = %+v, want %+v", got, want)
	}
	h, _ := hedge.New(hedge.Settings{Delay: 20 * time.Millisecond})
	if got, want := ps[1].(*hedge.Policy).String(), h.String(); got != want {
		t.Errorf("hedge: {delay: 20ms} = %s, want %s", got, want)
	}
	for i, s := range []limit.Settings{{}, {Algorithm: limit.AIMD(limit.AIMDSettings{})}} {
		l, _ := limit.New(s)
		if got, want := ps[2+i].(*limit.Limiter).Settings(), l.Settings(); !reflect.DeepEqual(got, want) {
			t.Errorf("chain[%d] = %+v, want %+v", 2+i, got, want)
		}
	}
	if got, want := ps[4].(*limit.Bulkhead).Settings(), (limit.BulkheadSettings{MaxConcurrent: 1}); got != want {
		t.Errorf("bulkhead: {maxConcurrent: 1} = %+v, want %+v", got, want)
	}
}

// The YAML and the JSON file of the overload chain give the same chain.
func TestOverloadYAMLAndJSON(t *testing.T) {
	y, j := load(t, "testdata/overload.yaml"), load(t, "testdata/overload.json")
	cy, cj := build(t, y), build(t, j)
	if got, want := cj.String(), cy.String(); got != want {
		t.Errorf("JSON chain = %s, want %s (YAML)", got, want)
	}
	if got, want := cj.Findings(), cy.Findings(); !reflect.DeepEqual(got, want) {
		t.Errorf("JSON findings = %v, want %v (YAML)", got, want)
	}
	py, pj := cy.Policies(), cj.Policies()
	for i := range py {
		var a, b any
		switch p := py[i].(type) {
		case *throttle.Throttle:
			a, b = p.Settings(), pj[i].(*throttle.Throttle).Settings()
		case *limit.Limiter:
			a, b = p.Settings(), pj[i].(*limit.Limiter).Settings()
		case *limit.Bulkhead:
			a, b = p.Settings(), pj[i].(*limit.Bulkhead).Settings()
		default:
			continue
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("chain[%d]: JSON settings %+v, want %+v (YAML)", i, b, a)
		}
	}
	for _, kind := range []string{"throttle(", "hedge(", "limit(", "bulkhead("} {
		if !strings.Contains(cy.String(), kind) {
			t.Errorf("testdata/overload.yaml: %s has no %s…)", cy, kind)
		}
	}
}

// Each Chain call builds new overload policies: a slot taken in one
// chain's bulkhead or limit leaves the other's free, and the calls run
// through them.
func TestOverloadChainsAreIndependent(t *testing.T) {
	s := parse(t, `
chain:
  - throttle: {}
  - hedge: {delay: 1h}
  - limit: {initialLimit: 1, maxLimit: 1}
  - bulkhead: {maxConcurrent: 1}
`)
	c1, c2 := build(t, s), build(t, s)
	p1, p2 := c1.Policies(), c2.Policies()
	for i := range p1 {
		if p1[i] == p2[i] {
			t.Errorf("policy %d (%v) is shared by two chains", i, p1[i])
		}
	}
	b1, b2 := p1[3].(*limit.Bulkhead), p2[3].(*limit.Bulkhead)
	l1, l2 := p1[2].(*limit.Limiter), p2[2].(*limit.Limiter)
	permit, err := b1.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lp, err := l1.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if b1.InFlight() != 1 || b2.InFlight() != 0 || l1.InFlight() != 1 || l2.InFlight() != 0 {
		t.Errorf("after a slot taken in chain 1: bulkheads %d and %d, limits %d and %d in flight; want 1, 0, 1, 0",
			b1.InFlight(), b2.InFlight(), l1.InFlight(), l2.InFlight())
	}
	called := false
	if err := c2.Do(context.Background(), func(context.Context) error { called = true; return nil }); err != nil || !called {
		t.Errorf("chain 2 with chain 1's slots taken: called %v, %v; want called, nil", called, err)
	}
	if err := c1.Do(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, limit.ErrLimited) {
		t.Errorf("chain 1 with its slots taken: %v, want a refusal matching limit.ErrLimited", err)
	}
	lp.Done(nil)
	permit.Done(nil)
	if err := c1.Do(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Errorf("chain 1 with its slots free: %v", err)
	}
}

// overloadCase is an error case whose error must unwrap to the error of
// the policy's constructor: cause is "throttle", "limit" or "hedge", with
// the Go field it names, e.g. "limit Settings.MaxWait".
type overloadCase struct {
	errorCase
	cause string
}

func checkOverload(t *testing.T, cases []overloadCase) {
	t.Helper()
	ec := make([]errorCase, len(cases))
	for i, tc := range cases {
		ec[i] = tc.errorCase
	}
	checkErrors(t, ec)
	for _, tc := range cases {
		if tc.cause == "" {
			continue
		}
		_, err := spec.Parse([]byte(tc.src))
		pkg, field, _ := strings.Cut(tc.cause, " ")
		var got string
		switch pkg {
		case "throttle":
			var se *throttle.SettingsError
			if errors.As(err, &se) {
				got = se.Field
			}
		case "limit":
			var se *limit.SettingsError
			if errors.As(err, &se) {
				got = se.Field
			}
		case "hedge":
			// hedge.New's errors are not typed; they name the field.
			if e := new(spec.Error); errors.As(err, &e) && strings.HasPrefix(e.Err.Error(), "hedge: Settings."+field+" = ") {
				got = field
			}
		}
		if got != field {
			t.Errorf("%s: %v; want the %s constructor's error for %s", tc.name, err, pkg, field)
		}
	}
}

func TestOverloadErrors(t *testing.T) {
	const (
		h  = "chain:\n  - hedge:\n      delay: 20ms\n"
		l  = "chain:\n  - limit:\n      maxQueue: 5\n"
		bh = "chain:\n  - bulkhead:\n      maxConcurrent: 4\n"
	)
	checkOverload(t, []overloadCase{
		// Unknown fields, the func-typed ones among them.
		{errorCase{"throttle unknown", "chain:\n  - throttle: {K: 2}", 2, "chain[0].throttle.K", ""}, ""},
		{errorCase{"throttle isAccepted", "chain:\n  - throttle:\n      isAccepted: true", 3, "chain[0].throttle.isAccepted", ""}, ""},
		{errorCase{"hedge unknown", h + "      maxHedge: 2", 4, "chain[0].hedge.maxHedge", ""}, ""},
		{errorCase{"limit unknown", l + "      isDrop: x", 4, "chain[0].limit.isDrop", ""}, ""},
		{errorCase{"bulkhead unknown", bh + "      maxWaiting: 1s", 4, "chain[0].bulkhead.maxWaiting", ""}, ""},
		{errorCase{"a misspelt kind", "chain:\n  - timeout: 1s\n  - bulkhed: {maxConcurrent: 4}", 3, "chain[1].bulkhed", ""}, ""},

		// Bad values.
		{errorCase{"a scalar for a throttle", "chain:\n  - throttle: 2", 2, "chain[0].throttle", ""}, ""},
		{errorCase{"no value for a limit", "chain:\n  - limit:", 2, "chain[0].limit", ""}, ""},
		{errorCase{"a list for a hedge", "chain:\n  - hedge: [20ms]", 2, "chain[0].hedge", ""}, ""},
		{errorCase{"a number for a delay", "chain:\n  - hedge: {delay: 20}", 2, "chain[0].hedge.delay", ""}, ""},
		{errorCase{"a negative window", "chain:\n  - throttle:\n      window: -1m", 3, "chain[0].throttle.window", ""}, ""},
		{errorCase{"a string for k", `{"chain": [{"throttle": {"k": "2"}}]}`, 1, "chain[0].throttle.k", ""}, ""},
		{errorCase{"a fraction for maxConcurrent", "chain:\n  - bulkhead: {maxConcurrent: 2.5}", 2, "chain[0].bulkhead.maxConcurrent", ""}, ""},
		{errorCase{"a duration for maxLimit", l + "      maxLimit: 10s", 4, "chain[0].limit.maxLimit", ""}, ""},
		{errorCase{"a number for an algorithm", "chain:\n  - limit:\n      algorithm: 2", 3, "chain[0].limit.algorithm", ""}, ""},
		{errorCase{"an unknown algorithm", "chain:\n  - limit:\n      algorithm: vegas", 3, "chain[0].limit.algorithm", ""}, ""},
		{errorCase{"a gradient2 setting with aimd", "chain:\n  - limit:\n      algorithm: aimd\n      smoothing: 0.3", 4, "chain[0].limit.smoothing", ""}, ""},
		{errorCase{"an aimd setting with gradient2", "chain:\n  - limit:\n      backoffRatio: 0.8", 3, "chain[0].limit.backoffRatio", ""}, ""},

		// What must be given.
		{errorCase{"hedge without delay", "chain:\n  - hedge: {quantile: 0.95}", 2, "chain[0].hedge.delay", ""}, ""},
		{errorCase{"hedge: {}", "chain:\n  - timeout: 1s\n  - hedge: {}", 3, "chain[1].hedge.delay", ""}, ""},
		{errorCase{"bulkhead without maxConcurrent", "chain:\n  - bulkhead:\n      maxQueue: 3", 2, "chain[0].bulkhead.maxConcurrent", ""}, ""},

		// The constructors' own errors, on the field they name.
		{errorCase{"throttle k", "chain:\n  - throttle:\n      k: 0.5", 3, "chain[0].throttle.k", ""}, "throttle K"},
		{errorCase{"throttle k infinite", "chain:\n  - throttle: {k: .inf}", 2, "chain[0].throttle.k", ""}, "throttle K"},
		{errorCase{"throttle window", "chain:\n  - throttle:\n      window: 5ns", 3, "chain[0].throttle.window", ""}, "throttle Window"},
		{errorCase{"throttle maxRejectionRate", "chain:\n  - throttle:\n      maxRejectionRate: 1.5", 3, "chain[0].throttle.maxRejectionRate", ""}, "throttle MaxRejectionRate"},
		{errorCase{"throttle minRequests", "chain:\n  - throttle:\n      minRequests: -1", 3, "chain[0].throttle.minRequests", ""}, "throttle MinRequests"},

		{errorCase{"hedge delay 0", "chain:\n  - hedge:\n      delay: 0s", 3, "chain[0].hedge.delay", ""}, "hedge Delay"},
		{errorCase{"hedge quantile", h + "      quantile: 1", 4, "chain[0].hedge.quantile", ""}, "hedge Quantile"},
		{errorCase{"hedge quantile NaN", h + "      quantile: .nan", 4, "chain[0].hedge.quantile", ""}, "hedge Quantile"},
		{errorCase{"hedge minSamples", h + "      minSamples: -1", 4, "chain[0].hedge.minSamples", ""}, "hedge MinSamples"},
		{errorCase{"hedge maxDelay under minDelay", h + "      minDelay: 50ms\n      maxDelay: 40ms", 5, "chain[0].hedge.maxDelay", ""}, "hedge MaxDelay"},
		{errorCase{"hedge minDelay over the default maxDelay", h + "      minDelay: 1s", 2, "chain[0].hedge.maxDelay", ""}, "hedge MaxDelay"},
		{errorCase{"hedge maxHedges", h + "      maxHedges: 17", 4, "chain[0].hedge.maxHedges", ""}, "hedge MaxHedges"},
		{errorCase{"hedge maxHedges negative", h + "      maxHedges: -1", 4, "chain[0].hedge.maxHedges", ""}, "hedge MaxHedges"},
		{errorCase{"hedge budget over maxHedges", h + "      budget: 1.5", 4, "chain[0].hedge.budget", ""}, "hedge Budget"},
		{errorCase{"hedge budget negative", h + "      maxHedges: 2\n      budget: -0.1", 5, "chain[0].hedge.budget", ""}, "hedge Budget"},
		{errorCase{"hedge burst", h + "      burst: -1", 4, "chain[0].hedge.burst", ""}, "hedge Burst"},

		{errorCase{"limit initialLimit negative", l + "      initialLimit: -1", 4, "chain[0].limit.initialLimit", ""}, "limit Settings.InitialLimit"},
		{errorCase{"limit initialLimit over maxLimit", l + "      maxLimit: 10\n      initialLimit: 11", 5, "chain[0].limit.initialLimit", ""}, "limit Settings.InitialLimit"},
		{errorCase{"limit minLimit over maxLimit", l + "      minLimit: 20\n      maxLimit: 10", 4, "chain[0].limit.minLimit", ""}, "limit Settings.MinLimit"},
		{errorCase{"limit maxLimit negative", l + "      maxLimit: -1", 4, "chain[0].limit.maxLimit", ""}, "limit Settings.MaxLimit"},
		{errorCase{"limit maxQueue negative", "chain:\n  - limit:\n      maxQueue: -1", 3, "chain[0].limit.maxQueue", ""}, "limit Settings.MaxQueue"},
		{errorCase{"limit maxWait without a queue", "chain:\n  - limit:\n      maxWait: 50ms", 3, "chain[0].limit.maxWait", ""}, "limit Settings.MaxWait"},
		{errorCase{"limit smoothing", l + "      smoothing: 1.5", 4, "chain[0].limit.smoothing", ""}, "limit Gradient2Settings.Smoothing"},
		{errorCase{"limit queueSize", l + "      algorithm: gradient2\n      queueSize: -1", 5, "chain[0].limit.queueSize", ""}, "limit Gradient2Settings.QueueSize"},
		{errorCase{"limit tolerance", l + "      tolerance: 0.5", 4, "chain[0].limit.tolerance", ""}, "limit Gradient2Settings.Tolerance"},
		{errorCase{"limit longWindow", l + "      longWindow: -600", 4, "chain[0].limit.longWindow", ""}, "limit Gradient2Settings.LongWindow"},
		{errorCase{"limit shortWindow", l + "      shortWindow: -1", 4, "chain[0].limit.shortWindow", ""}, "limit Gradient2Settings.ShortWindow"},
		{errorCase{"limit backoffRatio", l + "      algorithm: aimd\n      backoffRatio: 0.4", 5, "chain[0].limit.backoffRatio", ""}, "limit AIMDSettings.BackoffRatio"},

		{errorCase{"bulkhead maxConcurrent 0", "chain:\n  - bulkhead:\n      maxConcurrent: 0", 3, "chain[0].bulkhead.maxConcurrent", ""}, "limit BulkheadSettings.MaxConcurrent"},
		{errorCase{"bulkhead maxQueue", bh + "      maxQueue: -1", 4, "chain[0].bulkhead.maxQueue", ""}, "limit BulkheadSettings.MaxQueue"},
		{errorCase{"bulkhead maxWait without a queue", bh + "      maxWait: 10ms", 4, "chain[0].bulkhead.maxWait", ""}, "limit BulkheadSettings.MaxWait"},
	})

	for src, want := range map[string]string{
		"chain:\n  - limit: {algorithm: AIMD}":               `did you mean "aimd"?`,
		"chain:\n  - throttle: {K: 2}":                       `did you mean "k"?`,
		"chain:\n  - hedeg: {delay: 1ms}":                    `did you mean "hedge"?`,
		"chain:\n  - limit: {algorithm: aimd, queueSize: 3}": "set algorithm: gradient2",
	} {
		if _, err := spec.Parse([]byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v, want it to contain %q", src, err, want)
		}
	}
	// An unknown policy's error lists every kind.
	_, err := spec.Parse([]byte("chain:\n  - ratelimit: {}"))
	for _, kind := range []string{"timeout", "retry", "breaker", "throttle", "hedge", "limit", "bulkhead"} {
		if err == nil || !strings.Contains(err.Error(), kind) {
			t.Errorf("an unknown policy: %v, want it to name %s", err, kind)
		}
	}

}
