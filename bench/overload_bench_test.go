package bench

import (
	"context"
	"flag"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/throttle"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/adaptivethrottler"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"
)

// The overload policies on the success path: every call returns nil at
// once, no slot is ever short, nothing is throttled, no hedge fires.
// BenchmarkOverload runs callguard's bulkhead, adaptive limiter, throttle
// and hedge against failsafe-go v0.9.8's, in pairs named alike for
// benchstat: BenchmarkOverload/<pair>/<impl>, <impl> being callguard,
// failsafe, or a reference (what callguard's allocations are held to).
// Every implementation runs with a per-call context and hands the call the
// context of its attempt; failsafe-go runs as its documentation shows,
// failsafe.With(policies...), with the caller's context given through
// WithContext and the attempt's through Execution.Context (fsOp, in
// chain_test.go). Pairs marked parallel run under b.RunParallel, the others
// on one goroutine with b.Loop.
//
// Peer configuration (failsafe-go v0.9.8 documents its policies at
// failsafe-go.dev, the repository failsafe-go/failsafe-go.dev; its doc.go
// files say no more than "Package bulkhead provides a Bulkhead policy"):
//
//   - bulkhead: bulkhead.md, Usage: "Permit 10 concurrent executions",
//     bulkhead.New[any](10), no wait (the default: "further executions
//     will immediately fail with ErrBulkheadFull"). callguard: the same 10
//     slots and no queue, limit.BulkheadSettings{MaxConcurrent: 10}.
//   - adaptive limiter: adaptivelimiter.NewWithDefaults ("min, max, and
//     initial limits of 1, 200, and 20 respectively, and a
//     maxLimitFactor of 5", recent window 1 s–30 s / 50 samples, baseline
//     10, correlation 50, no queueing). failsafe-go has neither AIMD nor
//     Gradient2: both of callguard's algorithms are held against that one
//     limiter, with the same 20 within [1, 200] and no queue, callguard's
//     defaults (limit.Settings{} is Gradient2; AIMD with its default
//     backoff 0.9). adaptive-limiter.md's first example adds
//     WithQueueing(2, 3) and a max of 100; the default is used, as
//     callguard's has no queue either.
//   - throttle: adaptive-throttler.md, Usage: "Starts rejecting at 10%
//     failures per minute, after 5 executions, up to 90% max rejections",
//     WithFailureRateThreshold(0.1, 5, time.Minute).WithMaxRejectionRate(.9)
//     (its HandleErrors(ErrConnecting) names an error of the example's own;
//     every error counts by default). callguard: throttle.Settings{}, its
//     defaults (K 2, window 1 min, max 0.9, min 20 requests).
//   - hedge: hedge.md, Usage, hedgepolicy.BuilderWithDelay, with the
//     default of one hedge ("By default, a HedgePolicy will perform a
//     single hedged execution"; the page's example raises it to 2) and a
//     delay of 1 h so that none fires. callguard: hedge.Settings{Delay: 1 h},
//     its defaults otherwise (1 hedge, budget 5 %).
//   - hedge in a chain: policies.md, "Composition Recommendations": "a
//     RetryPolicy or HedgePolicy, a CircuitBreaker ... and a Timeout as the
//     inner-most policy", so failsafe.With(hedge, breaker, timeout); the
//     breaker as circuit-breaker.md's Usage ("Opens after 5 failures,
//     half-opens after 1 minute, closes after 2 successes"), the timeout 1 s
//     (failsafe-go has no default; its examples/http_test.go uses 1 s).
//     callguard: chain.New(hedge, breaker, timeout 1s), the order of hedge's
//     package documentation, with BenchmarkChain's breaker (5 consecutive
//     failures).

var overloadGoal = flag.Bool("overload-goal", false, "run TestOverloadSuccessPathGoal: each pair of BenchmarkOverload through testing.Benchmark, with its ratio and callguard's allocations checked")

// ovlSlots is the bulkhead's size: failsafe-go.dev bulkhead.md's 10.
const ovlSlots = 10

// ovlNoHedge is the hedging delay of the benchmarks: no hedge fires.
const ovlNoHedge = time.Hour

type ovlImpl struct {
	name   string
	config string // one line, for the README
	new    func(tb testing.TB, call callFunc) op
}

type ovlPair struct {
	name     string
	parallel bool
	// impls: callguard, failsafe, then the reference, if any.
	impls []ovlImpl
	// ref names the implementation whose allocations bound callguard's in
	// TestOverloadSuccessPathGoal; "" bounds them to 0.
	ref string
}

var (
	ovlBulkhead = []ovlImpl{
		{"callguard", "limit.NewBulkhead(limit.BulkheadSettings{MaxConcurrent: 10}): no queue", ovlCallguardBulkhead},
		{"failsafe", "bulkhead.New[any](10): no wait (bulkhead.md)", ovlFailsafeBulkhead},
	}
	ovlThrottle = []ovlImpl{
		{"callguard", "throttle.New(throttle.Settings{}): K 2, window 1m, max 0.9, min 20 requests", ovlCallguardThrottle},
		{"failsafe", "adaptivethrottler.NewBuilder[any]().WithFailureRateThreshold(0.1, 5, time.Minute).WithMaxRejectionRate(.9) (adaptive-throttler.md)", ovlFailsafeThrottle},
	}
	ovlGradient2 = []ovlImpl{
		{"callguard", "limit.New(limit.Settings{}): Gradient2, limit 20 within [1, 200], no queue", ovlCallguardGradient2},
		{"failsafe", "adaptivelimiter.NewWithDefaults[any](): limit 20 within [1, 200], max factor 5, no queueing", ovlFailsafeLimiter},
	}
	ovlAIMD = []ovlImpl{
		{"callguard", "limit.New(limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{})}): backoff 0.9, limit 20 within [1, 200], no queue", ovlCallguardAIMD},
		{"failsafe", "adaptivelimiter.NewWithDefaults[any]() (failsafe-go has no AIMD)", ovlFailsafeLimiter},
	}
)

// ovlPairs are the rows of BenchmarkOverload. The limiter pairs are named
// for both sides: callguard's algorithm vs failsafe-go's adaptivelimiter.
var ovlPairs = []ovlPair{
	{name: "bulkhead", impls: ovlBulkhead},
	{name: "bulkhead-parallel", parallel: true, impls: ovlBulkhead},
	{name: "throttle", impls: ovlThrottle},
	{name: "throttle-parallel", parallel: true, impls: ovlThrottle},
	{name: "limiter-gradient2-vs-adaptive", impls: ovlGradient2},
	{name: "limiter-gradient2-vs-adaptive-parallel", parallel: true, impls: ovlGradient2},
	{name: "limiter-aimd-vs-adaptive", impls: ovlAIMD},
	{name: "limiter-aimd-vs-adaptive-parallel", parallel: true, impls: ovlAIMD},
	{name: "hedge", ref: "context-withcancel", impls: []ovlImpl{
		{"callguard", "hedge.New(hedge.Settings{Delay: time.Hour}): 1 hedge, budget 5 %", ovlCallguardHedge},
		{"failsafe", "hedgepolicy.NewWithDelay[any](time.Hour): 1 hedge (hedge.md)", ovlFailsafeHedge},
		{"context-withcancel", "context.WithCancel + call + cancel: the cancelable context a hedge gives its first attempt", ovlWithCancel},
	}},
	{name: "hedge-in-chain", ref: "callguard-without-hedge", impls: []ovlImpl{
		{"callguard", "chain.New(hedge 1h, breaker 5 consecutive failures, timeout 1s)", ovlCallguardHedgeChain},
		{"failsafe", "failsafe.With(hedgepolicy 1h, circuitbreaker 5 failures / 1m / 2 successes, timeout 1s) (policies.md order)", ovlFailsafeHedgeChain},
		{"callguard-without-hedge", "chain.New(breaker, timeout 1s): the same chain without the hedge", ovlCallguardBreakerTimeout},
	}},
}

// BenchmarkOverload measures the success path of the overload policies,
// callguard against failsafe-go: BenchmarkOverload/<pair>/<impl>.
func BenchmarkOverload(b *testing.B) {
	for _, p := range ovlPairs {
		b.Run(p.name, func(b *testing.B) {
			for _, im := range p.impls {
				b.Run(im.name, func(b *testing.B) { ovlBench(b, p.parallel, im) })
			}
		})
	}
}

// ovlBench runs im's op on the success path, on one goroutine (b.Loop)
// or under b.RunParallel.
func ovlBench(b *testing.B, parallel bool, im ovlImpl) {
	do := im.new(b, succeed)
	b.ReportAllocs()
	if parallel {
		b.ResetTimer()
		runParallel(b, do)
		return
	}
	ctx := context.Background()
	for b.Loop() {
		if err := do(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// TestOverloadImplsWork checks that every implementation of BenchmarkOverload
// runs the call exactly once with nil, returns nil, and, where a hedge or a
// timeout is in the way, hands the call a context of its own.
func TestOverloadImplsWork(t *testing.T) {
	for _, p := range ovlPairs {
		for _, im := range p.impls {
			t.Run(p.name+"/"+im.name, func(t *testing.T) {
				var calls int
				var own bool
				ctx := context.Background()
				do := im.new(t, func(actx context.Context) error {
					calls++
					own = actx != ctx
					return nil
				})
				for range 3 {
					if err := do(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if calls != 3 {
					t.Errorf("3 ops ran the call %d times, want 3", calls)
				}
				if want := strings.HasPrefix(p.name, "hedge"); want && !own {
					t.Errorf("the call got the caller's context, want one of its own")
				}
			})
		}
	}
}

// TestOverloadSuccessPathGoal times each pair of BenchmarkOverload with
// testing.Benchmark (the median of 3 rounds, the implementations taking
// turns) and checks the goal: failsafe-go takes at least twice callguard's
// time per call, and callguard allocates nothing, or, for the hedge, no
// more than its reference (a bare context.WithCancel standalone; the same
// chain without the hedge in a chain).
//
//	go test -run TestOverloadSuccessPathGoal -overload-goal -v .
func TestOverloadSuccessPathGoal(t *testing.T) {
	if !*overloadGoal {
		t.Skip("run with -overload-goal")
	}
	if ovlRaceBuild() {
		t.Skip("allocations differ under -race (sync.Pool drops items)")
	}
	const rounds = 3
	var table []string
	table = append(table, "| pair | callguard ns/op | allocs | failsafe ns/op | allocs | failsafe/callguard | callguard allocs allowed | goal |",
		"| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
	for _, p := range ovlPairs {
		runs := make([][]testing.BenchmarkResult, len(p.impls))
		for range rounds {
			for i, im := range p.impls {
				runs[i] = append(runs[i], testing.Benchmark(func(b *testing.B) { ovlBench(b, p.parallel, im) }))
			}
		}
		ns := make([]float64, len(p.impls))
		allocs := make([]int64, len(p.impls))
		for i := range p.impls {
			ns[i], allocs[i] = ovlMedian(runs[i])
			if ns[i] == 0 {
				t.Fatalf("%s/%s: no result (the benchmark failed)", p.name, p.impls[i].name)
			}
		}
		ratio := ns[1] / ns[0]
		allowed, allowedText := int64(0), "0"
		if p.ref != "" {
			i := slices.IndexFunc(p.impls, func(im ovlImpl) bool { return im.name == p.ref })
			allowed = allocs[i]
			allowedText = fmt.Sprintf("≤ %d (%s: %.1f ns/op)", allowed, p.ref, ns[i])
		}
		var missed []string
		if ratio < 2 {
			missed = append(missed, fmt.Sprintf("ratio %.2f < 2", ratio))
		}
		if allocs[0] > allowed {
			missed = append(missed, fmt.Sprintf("%d allocs > %d", allocs[0], allowed))
		}
		goal := "met"
		if len(missed) > 0 {
			goal = "missed: " + strings.Join(missed, ", ")
			t.Errorf("%s: %s", p.name, goal)
		}
		table = append(table, fmt.Sprintf("| %s | %.1f | %d | %.1f | %d | %.2f | %s | %s |",
			p.name, ns[0], allocs[0], ns[1], allocs[1], ratio, allowedText, goal))
	}
	t.Logf("median of %d rounds (testing.Benchmark)\n%s", rounds, strings.Join(table, "\n"))
}

// ovlMedian returns the median ns/op of rs, and the median allocs/op.
func ovlMedian(rs []testing.BenchmarkResult) (float64, int64) {
	ns := make([]float64, 0, len(rs))
	allocs := make([]int64, 0, len(rs))
	for _, r := range rs {
		if r.N == 0 {
			return 0, 0
		}
		ns = append(ns, float64(r.T.Nanoseconds())/float64(r.N))
		allocs = append(allocs, r.AllocsPerOp())
	}
	slices.Sort(ns)
	slices.Sort(allocs)
	return ns[len(ns)/2], allocs[len(allocs)/2]
}

// ovlRaceBuild reports whether the test binary was built with -race.
func ovlRaceBuild() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// --- callguard ---

func ovlCallguardBulkhead(tb testing.TB, call callFunc) op {
	bh, err := limit.NewBulkhead(limit.BulkheadSettings{MaxConcurrent: ovlSlots})
	if err != nil {
		tb.Fatal(err)
	}
	return func(ctx context.Context) error { return bh.Do(ctx, call) }
}

func ovlCallguardThrottle(tb testing.TB, call callFunc) op {
	th, err := throttle.New(throttle.Settings{})
	if err != nil {
		tb.Fatal(err)
	}
	return func(ctx context.Context) error { return th.Do(ctx, call) }
}

func ovlCallguardGradient2(tb testing.TB, call callFunc) op {
	return ovlCallguardLimiter(tb, call, limit.Settings{})
}

func ovlCallguardAIMD(tb testing.TB, call callFunc) op {
	return ovlCallguardLimiter(tb, call, limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{})})
}

func ovlCallguardLimiter(tb testing.TB, call callFunc, s limit.Settings) op {
	l, err := limit.New(s)
	if err != nil {
		tb.Fatal(err)
	}
	return func(ctx context.Context) error { return l.Do(ctx, call) }
}

func ovlCallguardHedgePolicy(tb testing.TB) *hedge.Policy {
	h, err := hedge.New(hedge.Settings{Delay: ovlNoHedge})
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

func ovlCallguardHedge(tb testing.TB, call callFunc) op {
	h := ovlCallguardHedgePolicy(tb)
	return func(ctx context.Context) error { return h.Do(ctx, call) }
}

func ovlCallguardHedgeChain(tb testing.TB, call callFunc) op {
	return cgChain(tb, call, ovlCallguardHedgePolicy(tb), cgBreaker(tb), cgTimeout(tb, time.Second))
}

func ovlCallguardBreakerTimeout(tb testing.TB, call callFunc) op {
	return cgChain(tb, call, cgBreaker(tb), cgTimeout(tb, time.Second))
}

// ovlWithCancel is the floor of a hedge: the cancelable context its first
// attempt runs with.
func ovlWithCancel(_ testing.TB, call callFunc) op {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		err := call(ctx)
		cancel()
		return err
	}
}

// --- failsafe-go ---

func ovlFailsafeBulkhead(_ testing.TB, call callFunc) op {
	return fsOp(call, bulkhead.New[any](ovlSlots))
}

func ovlFailsafeThrottle(_ testing.TB, call callFunc) op {
	return fsOp(call, adaptivethrottler.NewBuilder[any]().
		WithFailureRateThreshold(0.1, 5, time.Minute).
		WithMaxRejectionRate(.9).
		Build())
}

func ovlFailsafeLimiter(_ testing.TB, call callFunc) op {
	return fsOp(call, adaptivelimiter.NewWithDefaults[any]())
}

func ovlFailsafeHedge(_ testing.TB, call callFunc) op {
	return fsOp(call, hedgepolicy.NewWithDelay[any](ovlNoHedge))
}

func ovlFailsafeHedgeChain(_ testing.TB, call callFunc) op {
	return fsOp(call,
		hedgepolicy.NewWithDelay[any](ovlNoHedge),
		circuitbreaker.NewBuilder[any]().
			WithFailureThreshold(5).
			WithDelay(time.Minute).
			WithSuccessThreshold(2).
			Build(),
		fstimeout.New[any](time.Second))
}
