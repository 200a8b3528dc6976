package bench

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/internal/scenario"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/preset"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
)

// The protection benchmark: resilience stacks against the simulated
// downstream of internal/scenario, in virtual time, scenario by load by
// seed. What a kit exists for — goodput kept, load not amplified, outages
// detected fast, recovery not delayed, no retry storm — measured side by
// side with the peers, each configured as its own docs recommend.
//
//	cd bench && go test -run '^$' -bench Protection -benchtime 1x
//	cd bench && go test -run TestProtection -protection -v   # the tables

var (
	protection  = flag.Bool("protection", false, "run the protection benchmark's full sweep as a test and print its tables")
	onlyStacks  = flag.String("stacks", "", "with -protection: only the stacks whose names match this regexp")
	onlyCells   = flag.String("cells", "", "with -protection: only the cells whose scenario/load matches this regexp")
	experiments = flag.Bool("experiments", false, "with -protection: add the experimental configurations")
)

// stackDef is a stack under test: a name, its configuration in words, and
// how to make it (inside the bubble, fresh for each run).
type stackDef struct {
	name, config string
	// new makes the stack for a run of seed: a stack's own random draws
	// (a retry's jitter, a throttle's rejections) come from it.
	new func(seed uint64) (scenario.Stack, error)
}

// cg describes a callguard chain for the benchmark.
type cg struct {
	attempts      int
	initial, max  time.Duration // Exponential backoff
	budget        float64       // retry budget ratio (0: none)
	consecutive   int
	consecFor     time.Duration // the run must last this long (breaker.Settings.ConsecutiveFor)
	rate          float64
	open, maxOpen time.Duration
	probes        int
	successes     int           // of the probes, to close (0: all)
	attempt       time.Duration // attempt timeout (0: none)
	adaptive      bool
	quantile      float64       // the adaptive timeout's (0: its default, p99.9)
	multiplier    float64       // the adaptive timeout's (0: its default, 1.5)
	window        time.Duration // the adaptive timeout's (0: its default, 60s)
	maxT          time.Duration // the adaptive timeout's Max (0: its default, 10 × the start)
	order         string        // "" canonical; "breaker-outside"; "retry-when-open"
	breakerless   bool
	// The overload policies, in their canonical places: limit → retry →
	// throttle → hedge → breaker → attempt timeout.
	throttle bool
	limit    string // "", "gradient2", "aimd", "bulkhead"
	// neutralRefusals: the breaker leaves the downstream's fast overload
	// refusals (its queue full) out, to the limit.
	neutralRefusals bool
	// limitOutside puts the limit outside the retry (CG024), rather than
	// inside it, between the hedge and the breaker.
	limitOutside bool
	hedge        bool
	// noRefusalRetry: the retry leaves the downstream's fast overload
	// refusals unretried (RetryIf), retrying the other failures.
	noRefusalRetry bool
	// bulkheadSize: the bulkhead's MaxConcurrent (0: 20).
	bulkheadSize int
	// fit: the retry plans its waits against the deadline
	// (retry.FitDeadline).
	fit bool
	// retryRejected: the retry retries the limit's refusals after the
	// wait (retry.RetryRejected).
	retryRejected bool
	// initialLimit, limitQueue: the limiter's InitialLimit (0: its
	// default, 20) and MaxQueue (0: no queue), queued calls waiting at
	// most limitWait.
	initialLimit, limitQueue int
	limitWait                time.Duration
	// maxLimit, tolerance: Gradient2's MaxLimit and Tolerance (0: the
	// defaults), for experiments.
	maxLimit  int
	tolerance float64
	// deadlineShare: Gradient2's DeadlineShare (0: its default; < 0:
	// never).
	deadlineShare float64
}

func (c cg) stack(seed uint64) (scenario.Stack, error) {
	ropts := []retry.Option{retry.MaxAttempts(c.attempts), retry.Exponential(c.initial, c.max), retry.Rand(rand.NewPCG(seed, 0x7e7))}
	if c.budget > 0 {
		b, err := retry.NewBudget(c.budget, 0)
		if err != nil {
			return nil, err
		}
		ropts = append(ropts, retry.WithBudget(b))
	}
	if c.order == "retry-when-open" {
		ropts = append(ropts, retry.RetryWhenOpen())
	}
	if c.fit {
		ropts = append(ropts, retry.FitDeadline())
	}
	if c.retryRejected {
		ropts = append(ropts, retry.RetryRejected())
	}
	if c.noRefusalRetry {
		ropts = append(ropts, retry.RetryIf(func(err error) bool { return !errors.Is(err, scenario.ErrOverloaded) }))
	}
	r, err := retry.New(ropts...)
	if err != nil {
		return nil, err
	}
	var ps []chain.Policy
	var att *timeout.Policy
	if c.attempt > 0 {
		var topts []timeout.Option
		if c.adaptive {
			topts = append(topts, timeout.Adaptive(timeout.AdaptiveOptions{Quantile: c.quantile, Multiplier: c.multiplier, Window: c.window, Max: c.maxT}))
		}
		if att, err = timeout.New(c.attempt, topts...); err != nil {
			return nil, err
		}
	}
	var over []chain.Policy // inside the retry, outside the breaker
	var lim chain.Policy
	if c.limit != "" {
		if lim, err = c.newLimit(); err != nil {
			return nil, err
		}
	}
	if c.throttle {
		th, err := throttle.New(throttle.Settings{Rand: rand.NewPCG(seed, 0x7407)})
		if err != nil {
			return nil, err
		}
		over = append(over, th)
	}
	if c.hedge {
		h, err := hedge.New(hedge.Settings{Delay: 100 * time.Millisecond, Quantile: 0.95})
		if err != nil {
			return nil, err
		}
		over = append(over, h)
	}
	if lim != nil && !c.limitOutside {
		over = append(over, lim)
	}
	if c.breakerless {
		ps = append([]chain.Policy{r}, over...)
	} else {
		bs := breaker.Settings{
			ConsecutiveFailures: c.consecutive, ConsecutiveFor: c.consecFor, FailureRate: c.rate,
			OpenTimeout: c.open, MaxOpenTimeout: c.maxOpen, HalfOpenProbes: c.probes, HalfOpenSuccesses: c.successes,
		}
		if c.neutralRefusals {
			bs.IsExcluded = func(err error) bool { return errors.Is(err, scenario.ErrOverloaded) }
		}
		b, err := breaker.New(bs)
		if err != nil {
			return nil, err
		}
		ps = append(append([]chain.Policy{r}, over...), b)
		if c.order == "breaker-outside" {
			ps = append([]chain.Policy{b, r}, over...)
		}
	}
	if att != nil {
		ps = append(ps, att)
	}
	if lim != nil && c.limitOutside {
		ps = append([]chain.Policy{lim}, ps...)
	}
	return chain.Options{Ignore: []string{"CG001", "CG002", "CG009", "CG013", "CG014", "CG018", "CG023", "CG024"}}.New(ps...)
}

func (c cg) describe() string {
	var parts []string
	parts = append(parts, fmt.Sprintf("retry %d attempts, backoff %v→%v ×2, jitter 0.2", c.attempts, c.initial, c.max))
	if c.budget > 0 {
		parts = append(parts, fmt.Sprintf("budget %g%% of calls", 100*c.budget))
	}
	if c.order == "retry-when-open" {
		parts = append(parts, "RetryWhenOpen")
	}
	if c.fit {
		parts = append(parts, "waits planned against the deadline (FitDeadline)")
	}
	if c.retryRejected {
		parts = append(parts, "the limit's refusals retried after the wait (RetryRejected)")
	}
	if c.noRefusalRetry {
		parts = append(parts, "overload refusals not retried (as grpcmw and httpmw: no pushback, no Retry-After)")
	}
	if !c.breakerless {
		var rule []string
		if c.consecutive > 0 && c.consecFor > 0 {
			rule = append(rule, fmt.Sprintf("%d consecutive over at least %v", c.consecutive, c.consecFor))
		} else if c.consecutive > 0 {
			rule = append(rule, fmt.Sprintf("%d consecutive", c.consecutive))
		}
		if c.rate > 0 {
			rule = append(rule, fmt.Sprintf("%g%% over 10s (20 calls)", 100*c.rate))
		}
		if len(rule) == 0 {
			rule = append(rule, "defaults: 10 consecutive or 50% over 10s (20 calls)")
		}
		stay := fmt.Sprintf("open %v", c.open)
		if c.maxOpen > 0 {
			stay = fmt.Sprintf("open %v doubling to %v", c.open, c.maxOpen)
		}
		probes := fmt.Sprintf("%d probes", max(c.probes, breaker.DefaultHalfOpenProbes))
		if c.successes > 0 {
			probes = fmt.Sprintf("closes on %d of %d probes", c.successes, max(c.probes, breaker.DefaultHalfOpenProbes))
		}
		where := "inside the retry"
		if c.order == "breaker-outside" {
			where = "outside the retry"
		}
		if c.neutralRefusals {
			where += ", overload refusals (queue full) left to the limit (IsExcluded)"
		}
		parts = append(parts, fmt.Sprintf("breaker %s, %s, %s, %s", strings.Join(rule, " or "), stay, probes, where))
	}
	switch {
	case c.attempt == 0:
		parts = append(parts, "no attempt timeout")
	case c.adaptive:
		q := c.quantile
		if q == 0 {
			q = 0.999
		}
		m := c.multiplier
		if m == 0 {
			m = 1.5
		}
		w := c.window
		if w == 0 {
			w = time.Minute
		}
		mx := c.maxT
		if mx == 0 {
			mx = 10 * c.attempt
		}
		parts = append(parts, fmt.Sprintf("attempt timeout adaptive from %v (p%g × %g over %v, at most %v)", c.attempt, 100*q, m, w, mx))
	default:
		parts = append(parts, fmt.Sprintf("attempt timeout %v", c.attempt))
	}
	if o := c.overloadConfig(); o != "" {
		parts = append(parts, o)
	}
	return strings.Join(parts, "; ")
}

// newLimit makes the chain's limiter or bulkhead.
func (c cg) newLimit() (chain.Policy, error) {
	switch c.limit {
	case "bulkhead":
		return limit.NewBulkhead(limit.BulkheadSettings{MaxConcurrent: cmp.Or(c.bulkheadSize, 20)})
	case "aimd":
		return limit.New(limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{}), InitialLimit: c.initialLimit, MaxQueue: c.limitQueue, MaxWait: c.limitWait})
	}
	ls := limit.Settings{InitialLimit: c.initialLimit, MaxLimit: c.maxLimit, MaxQueue: c.limitQueue, MaxWait: c.limitWait}
	if c.tolerance > 0 || c.deadlineShare != 0 {
		ls.Algorithm = limit.Gradient2(limit.Gradient2Settings{Tolerance: c.tolerance, DeadlineShare: c.deadlineShare})
	}
	return limit.New(ls)
}

// queueConfig describes the limiter's queue.
func (c cg) queueConfig() string {
	if c.limitQueue == 0 {
		return "no queue"
	}
	return fmt.Sprintf("a queue of %d waiting at most %v", c.limitQueue, c.limitWait)
}

// shareConfig describes Gradient2's DeadlineShare.
func (c cg) shareConfig() string {
	switch {
	case c.deadlineShare < 0:
		return "round trips never judged against the deadline"
	case c.deadlineShare == 0:
		return fmt.Sprintf("falling when round trips take %g of the time left", limit.DefaultDeadlineShare)
	}
	return fmt.Sprintf("falling when round trips take %g of the time left", c.deadlineShare)
}

// overloadConfig describes the overload policies of c.
func (c cg) overloadConfig() string {
	var parts []string
	where := "inside the retry"
	if c.limitOutside {
		where = "outside the retry"
	}
	switch c.limit {
	case "bulkhead":
		parts = append(parts, fmt.Sprintf("bulkhead %d at once, no queue, ", cmp.Or(c.bulkheadSize, 20))+where)
	case "aimd":
		parts = append(parts, fmt.Sprintf("limit AIMD (limit.Settings defaults: from %d in [1, 200], ×0.9 on a timeout), %s, %s", cmp.Or(c.initialLimit, limit.DefaultInitialLimit), c.queueConfig(), where))
	case "gradient2":
		parts = append(parts, fmt.Sprintf("limit Gradient2 (from %d in [1, %d], tolerance %g, short 10 / long 600 samples, %s), %s, %s",
			cmp.Or(c.initialLimit, limit.DefaultInitialLimit), cmp.Or(c.maxLimit, limit.DefaultMaxLimit), cmp.Or(c.tolerance, limit.DefaultTolerance),
			c.shareConfig(), c.queueConfig(), where))
	}
	if c.throttle {
		parts = append(parts, "throttle (throttle.Settings defaults: K 2 over 1m, at most 90% refused, after 20 requests) inside the retry")
	}
	if c.hedge {
		parts = append(parts, "hedge after the observed p95 (from 100ms), 1 hedge, budget 5% (hedge.Settings defaults)")
	}
	return strings.Join(parts, "; ")
}

func cgStack(name string, c cg) stackDef {
	return stackDef{name: name, config: c.describe(), new: c.stack}
}

// recommended is callguard's recommended chain (docs/ordering.md): the
// retry outside the breaker, without a budget, its waits fit to the
// deadline; an adaptive concurrency
// limit (Gradient2, its defaults: it falls when round trips take half of
// the callers' time left) inside the retry; the breaker tripping
// on 10 consecutive failures over at least 500 ms (a downstream down or
// hung, not one that answers some calls: docs/faults.md), no rate rule,
// leaving the downstream's overload refusals (its queue full:
// grpcmw.Overloaded, httpmw.Overloaded) to the limit, a short fixed stay,
// 2 of 3 probes to close; an adaptive attempt timeout following the p99 of
// the last 5 s of answers.
var recommended = cg{
	attempts: preset.DefaultAttempts, initial: 100 * time.Millisecond, max: time.Second, fit: true,
	// the breaker's own count rule, over the preset's span; no rate
	consecutive: breaker.DefaultConsecutiveFailures, consecFor: preset.DefaultConsecutiveFor,
	limit: "gradient2", neutralRefusals: true,
	// as the adapters retry: an overload refusal (ResourceExhausted, 429)
	// only when it says when, which the model's never do
	noRefusalRetry: true,
	open:           preset.DefaultOpenTimeout, successes: 2,
	attempt: 300 * time.Millisecond, adaptive: true, quantile: 0.99, window: 5 * time.Second, maxT: time.Second,
}

// asDocumented is the chain callguard's docs recommended before this
// benchmark judged it (a 10 % budget, a stay of 5 s doubling to 30 s, all
// 3 probes to close, an adaptive timeout on the p99.9).
var asDocumented = cg{
	attempts: 3, initial: 100 * time.Millisecond, max: time.Second, budget: 0.1,
	open: 5 * time.Second, maxOpen: 30 * time.Second,
	attempt: 300 * time.Millisecond, adaptive: true,
}

// with returns c changed by f: an ablation.
func (c cg) with(f func(*cg)) cg { f(&c); return c }

// stacks are every stack the benchmark compares.
func stacks() []stackDef {
	out := []stackDef{
		{"none", "no protection: one call per request", func(uint64) (scenario.Stack, error) { return scenario.None, nil }},
		cgStack("naive-retry", cg{attempts: 3, initial: 100 * time.Millisecond, max: time.Second, attempt: 300 * time.Millisecond, breakerless: true}),
		cgStack("callguard", recommended),
		cgStack("cg-as-documented", asDocumented),
		cgStack("cg-budget10", recommended.with(func(c *cg) { c.budget = 0.1 })),
		cgStack("cg-retries-refusals", recommended.with(func(c *cg) { c.noRefusalRetry = false })),
		cgStack("cg-growing-stay", recommended.with(func(c *cg) { c.maxOpen = 30 * time.Second })),
		cgStack("cg-open5", recommended.with(func(c *cg) { c.open = 5 * time.Second })),
		cgStack("cg-3of3", recommended.with(func(c *cg) { c.successes = 0 })),
		cgStack("cg-fixed-timeout", recommended.with(func(c *cg) { c.adaptive = false })),
		cgStack("cg-p99.9", recommended.with(func(c *cg) { c.quantile = 0 })),
		cgStack("cg-window60s", recommended.with(func(c *cg) { c.window = 0 })),
		cgStack("cg-consecutive5", recommended.with(func(c *cg) { c.consecutive = 5 })),
		// the chain before the do-no-harm rules: a run of 10 opens at
		// once, and 79 % of the attempts over 10 s (half the requests)
		cgStack("cg-rate79-at-once", recommended.with(func(c *cg) {
			c.consecFor, c.rate = 0, breaker.AttemptFailureRate(0.5, preset.DefaultAttempts)
		})),
		cgStack("cg-consecutive-at-once", recommended.with(func(c *cg) { c.consecFor = 0 })),
		cgStack("cg-CG002-breaker-outside", recommended.with(func(c *cg) { c.order = "breaker-outside" })),
		cgStack("cg-CG001-retry-when-open", recommended.with(func(c *cg) { c.order = "retry-when-open" })),
		cgStack("cg-CG009-no-attempt-timeout", recommended.with(func(c *cg) { c.attempt = 0 })),
	}
	out = append(out, mechanisms()...)
	out = append(out, overloadStacks()...)
	if *experiments {
		out = append(out, experimental...)
	}
	for _, p := range peerStacks {
		out = append(out, stackDef(p))
	}
	out = append(out, samePeers(recommended)...)
	out = append(out, parityPeers(recommended)...)
	if *onlyStacks != "" {
		re := regexp.MustCompile(*onlyStacks)
		out = slices.DeleteFunc(out, func(d stackDef) bool { return !re.MatchString(d.name) })
	}
	return out
}

// mechanisms are the rows of the mechanisms the protection issue asked to
// measure, each the recommended chain with one change: the retry's waits
// planned against the deadline; a limit that starts higher or queues
// rather than refuses the first burst; a breaker that sheds in proportion
// (the throttle beside it, a rate-only trip rule).
func mechanisms() []stackDef {
	return []stackDef{
		cgStack("cg-no-fit", recommended.with(func(c *cg) { c.fit = false })),
		cgStack("cg-rate50", recommended.with(func(c *cg) { c.rate = 0.5 })),
		cgStack("cg-rate79", recommended.with(func(c *cg) { c.rate = breaker.AttemptFailureRate(0.5, preset.DefaultAttempts) })),
		cgStack("cg-limit-from50", recommended.with(func(c *cg) { c.initialLimit = 50 })),
		cgStack("cg-limit-queue", recommended.with(func(c *cg) { c.limitQueue, c.limitWait = 10, 100*time.Millisecond })),
		cgStack("cg-retry-rejected", recommended.with(func(c *cg) { c.retryRejected = true })),
		cgStack("cg-share-never", recommended.with(func(c *cg) { c.deadlineShare = -1 })),
		cgStack("cg-rate-only", recommended.with(func(c *cg) {
			c.consecutive, c.consecFor, c.rate = 0, 0, breaker.AttemptFailureRate(0.5, preset.DefaultAttempts)
		})),
		cgStack("cg-probe-1of3", recommended.with(func(c *cg) { c.successes = 1 })),
		cgStack("cg-open500ms", recommended.with(func(c *cg) { c.open = 500 * time.Millisecond })),
		cgStack("cg-outside+rate50", recommended.with(func(c *cg) { c.order, c.rate = "breaker-outside", 0.5 })),
		cgStack("cg-outside+1of3", recommended.with(func(c *cg) { c.order, c.successes = "breaker-outside", 1 })),
	}
}

// experimental are configurations tried with -experiments.
var experimental = []stackDef{
	cgStack("x-w60", recommended.with(func(c *cg) { c.window = 0 })),
	cgStack("x-open2", recommended.with(func(c *cg) { c.open = 2 * time.Second })),
	cgStack("x-initial50", recommended.with(func(c *cg) { c.initial = 50 * time.Millisecond })),
	cgStack("x-bulkhead16", recommended.with(func(c *cg) { c.limit, c.bulkheadSize = "bulkhead", 16 })),
	cgStack("x-c15", recommended.with(func(c *cg) { c.consecutive = 15 })),
	cgStack("x-mult2", recommended.with(func(c *cg) { c.multiplier = 2 })),
	cgStack("x-tol1.2", recommended.with(func(c *cg) { c.tolerance = 1.2 })),
	cgStack("x-maxlimit30", recommended.with(func(c *cg) { c.maxLimit = 30 })),
	cgStack("x-mult2+tol1.2", recommended.with(func(c *cg) { c.multiplier, c.tolerance = 2, 1.2 })),
	cgStack("x-limit-from8", recommended.with(func(c *cg) { c.initialLimit = 8 })),
	cgStack("x-limit-from8+retry-rejected", recommended.with(func(c *cg) { c.initialLimit, c.retryRejected = 8, true })),
	cgStack("x-rate90", recommended.with(func(c *cg) { c.rate = 0.9 })),
	cgStack("x-share0.25", recommended.with(func(c *cg) { c.deadlineShare = 0.25 })),
	cgStack("x-share0.75", recommended.with(func(c *cg) { c.deadlineShare = 0.75 })),
}

// seeds per cell.
var seeds = []uint64{1, 2, 3, 4, 5}

// runOne runs one cell with one stack, in a bubble of its own.
func runOne(t *testing.T, cell scenario.Cell, def stackDef) scenario.Result {
	if drawsGlobal(def) {
		// backoff/v4 draws from math/rand's global source: one such run
		// at a time, the source seeded at its start (see seed_test.go).
		globalRand.Lock()
		defer globalRand.Unlock()
		seedGlobal(cell.Seed)
	}
	var res scenario.Result
	synctest.Test(t, func(t *testing.T) {
		st, err := def.new(cell.Seed)
		if err != nil {
			t.Fatal(err)
		}
		if res, err = scenario.Run(cell, st); err != nil {
			t.Fatal(err)
		}
	})
	return res
}

// cellRuns is a stack's results over the seeds of one cell.
type cellRuns struct {
	stack   stackDef
	results []scenario.Result
}

// median of a metric over the seeds, and its range.
func (c cellRuns) stat(f func(scenario.Result) float64) (median, lo, hi float64) {
	vs := make([]float64, 0, len(c.results))
	for _, r := range c.results {
		vs = append(vs, f(r))
	}
	slices.Sort(vs)
	return vs[len(vs)/2], vs[0], vs[len(vs)-1]
}

// metrics are what the benchmark reports, by unit.
var metrics = []struct {
	unit string
	f    func(scenario.Result) float64
}{
	{"successes", func(r scenario.Result) float64 { return float64(r.Successes) }},
	{"goodput-fault/s", func(r scenario.Result) float64 { return r.GoodputFault }},
	{"goodput-after/s", func(r scenario.Result) float64 { return r.GoodputAfter }},
	{"amplification", func(r scenario.Result) float64 { return r.Amplification }},
	{"p50-ms", func(r scenario.Result) float64 { return float64(r.P50) / 1e6 }},
	{"p99-ms", func(r scenario.Result) float64 { return float64(r.P99) / 1e6 }},
	{"detect-s", func(r scenario.Result) float64 { return r.Detect.Seconds() }},
	{"recover-s", func(r scenario.Result) float64 { return r.Recover.Seconds() }},
	{"wasted-s", func(r scenario.Result) float64 { return r.Wasted.Seconds() }},
	{"queue", func(r scenario.Result) float64 { return r.QueueMean }},
	{"metastable", func(r scenario.Result) float64 {
		if r.Metastable {
			return 1
		}
		return 0
	}},
}

// BenchmarkProtection reports every metric of every stack in every cell
// (medians over the seeds; -1 for detect-s and recover-s means never).
func BenchmarkProtection(b *testing.B) {
	for _, c := range sweepCells() {
		for _, def := range stacks() {
			b.Run("scenario="+c.scenario.Name+"/load="+c.load.Name+"/stack="+def.name, func(b *testing.B) {
				var runs cellRuns
				for b.Loop() {
					runs = cellRuns{stack: def}
					ok := testing.RunTests(func(string, string) (bool, error) { return true, nil }, []testing.InternalTest{{
						Name: "cell",
						F: func(t *testing.T) {
							for _, seed := range seeds {
								runs.results = append(runs.results, runOne(t, c.cell(seed), def))
							}
						},
					}})
					if !ok {
						b.Fatal("a run failed")
					}
				}
				for _, m := range metrics {
					med, _, _ := runs.stat(m.f)
					b.ReportMetric(med, m.unit)
				}
			})
		}
	}
}

// TestProtection runs the whole sweep and prints its tables (with
// -protection; it takes a minute or two).
func TestProtection(t *testing.T) {
	if !*protection {
		t.Skip("the full sweep runs with -protection")
	}
	sweep := runSweep(t)
	fmt.Print(sweep.tables())
	if *writeDocs {
		sweep.write(t)
	}
}

// TestRecommendedIsThePreset: the benchmark's callguard stack is the chain
// preset.Chain builds (what httpmw.Standard and grpcmw.Standard run), so
// that docs/protection.md measures what a user of the preset gets.
func TestRecommendedIsThePreset(t *testing.T) {
	st, err := recommended.stack(1)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := st.(*chain.Chain)
	if !ok {
		t.Fatalf("the recommended stack is a %T, want a *chain.Chain", st)
	}
	p, err := preset.Chain(preset.Settings{}, func(err error) bool { return errors.Is(err, scenario.ErrOverloaded) })
	if err != nil {
		t.Fatal(err)
	}
	if c.String() != p.String() {
		t.Errorf("the benchmark's recommended chain\n  %v\nthe preset's\n  %v", c, p)
	}
}
