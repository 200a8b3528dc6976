package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/internal/scenario"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"
)

// The tail experiment: hedging on "The Tail at Scale"'s case. The
// downstream (scenario.TailServer: p50 5 ms, p99 20 ms) makes 1 % of the
// requests 100× slow (scenario.Straggle), under an open loop at 25 % of
// its capacity. The goal: the callers' p99.9 cut ≥ 10× at ≤ 5 % more
// downstream calls, better than failsafe-go's hedgepolicy.
//
//	cd bench && go test -run TestTail -v

var tailStacks = []stackDef{
	{"none", "no protection: one call per request", func(uint64) (scenario.Stack, error) { return scenario.None, nil }},
	{"callguard-hedge", "hedge.New(hedge.Settings{Delay: 50ms, Quantile: 0.95}): after the observed p95 (from 50 ms until 100 answers), 1 hedge, budget 5 % (burst 30) — the package's defaults", func(uint64) (scenario.Stack, error) {
		h, err := hedge.New(hedge.Settings{Delay: 50 * time.Millisecond, Quantile: 0.95})
		if err != nil {
			return nil, err
		}
		return chain.Options{Ignore: []string{"CG018"}}.New(h)
	}},
	{"failsafe-hedge", "hedgepolicy.NewBuilderWithDelayQuantile(0.95, 1000, 100): after the observed p95 (its quantile mode: the last ~1,000 executions, hedging after 100), 1 hedge (default), no budget", func(uint64) (scenario.Stack, error) {
		return failsafeStack(hedgepolicy.NewBuilderWithDelayQuantile[any](0.95, 1000, 100).Build()), nil
	}},
	{"failsafe-hedge-budget", "the same, WithBudget(budget.New()): hedges at most 0.2 of the executions in flight, at least 3 at once (budget.New's defaults)", func(uint64) (scenario.Stack, error) {
		return failsafeStack(hedgepolicy.NewBuilderWithDelayQuantile[any](0.95, 1000, 100).WithBudget(budget.New()).Build()), nil
	}},
}

// failsafeStack runs one failsafe-go policy with the caller's context,
// handing the execution's context to the call.
func failsafeStack(p failsafe.Policy[any]) scenario.Stack {
	return failsafeExec(failsafe.With[any](p))
}

// failsafeExec runs a failsafe-go executor with the caller's context,
// handing the execution's context to the call.
func failsafeExec(ex failsafe.Executor[any]) scenario.Stack {
	return scenario.StackFunc(func(ctx context.Context, call func(context.Context) error) error {
		return ex.WithContext(ctx).RunWithExecution(func(e failsafe.Execution[any]) error {
			return call(e.Context())
		})
	})
}

// tailRuns runs every tail stack over the seeds.
func tailRuns(t *testing.T) []cellRuns {
	runs := make([]cellRuns, len(tailStacks))
	for i, def := range tailStacks {
		runs[i] = cellRuns{stack: def}
		for _, seed := range seeds {
			runs[i].results = append(runs[i].results, runOne(t, scenario.Cell{Server: scenario.TailServer, Scenario: scenario.Straggle, Load: scenario.TailLoad, Seed: seed}, def))
		}
	}
	return runs
}

// TestTail is the hedging goal: p99.9 cut ≥ 10× at ≤ 5 % extra load, and
// callguard's p99.9 and extra load at least as good as failsafe-go's.
func TestTail(t *testing.T) {
	runs := tailRuns(t)
	p999 := func(r scenario.Result) float64 { return float64(r.P999) / 1e6 }
	extra := func(r scenario.Result) float64 { return 100 * (r.Amplification - 1) }
	stat := map[string][2]float64{}
	for _, r := range runs {
		p, plo, phi := r.stat(p999)
		x, xlo, xhi := r.stat(extra)
		p99, _, _ := r.stat(func(r scenario.Result) float64 { return float64(r.P99) / 1e6 })
		t.Logf("%-22s p99.9 %7.1f ms [%.1f–%.1f]  p99 %6.1f ms  extra load %5.2f %% [%.2f–%.2f]  — %s", r.stack.name, p, plo, phi, p99, x, xlo, xhi, r.stack.config)
		stat[r.stack.name] = [2]float64{phi, xhi}
	}
	t.Log("\n" + tailTable(runs))
	none, cg := stat["none"], stat["callguard-hedge"]
	if cut := none[0] / cg[0]; cut < 10 || cg[1] > 5 {
		t.Errorf("callguard: p99.9 cut %.1f× at %.2f %% extra load (worst seeds); want ≥ 10× at ≤ 5 %%", cut, cg[1])
	}
	for _, peer := range []string{"failsafe-hedge", "failsafe-hedge-budget"} {
		fs := stat[peer]
		if cg[0] > fs[0]*1.05 && cg[1] > fs[1] {
			t.Errorf("%s does better: p99.9 %.1f ms at %.2f %% extra, callguard %.1f ms at %.2f %%", peer, fs[0], fs[1], cg[0], cg[1])
		}
	}
}

// tailTable is the tail experiment's table, for docs/hedge.md.
func tailTable(runs []cellRuns) string {
	s := "| stack | p99.9 ms | p99 ms | p50 ms | extra load | configuration |\n|---|---|---|---|---|---|\n"
	for _, r := range runs {
		p, plo, phi := r.stat(func(r scenario.Result) float64 { return float64(r.P999) / 1e6 })
		p99, _, _ := r.stat(func(r scenario.Result) float64 { return float64(r.P99) / 1e6 })
		p50, _, _ := r.stat(func(r scenario.Result) float64 { return float64(r.P50) / 1e6 })
		x, xlo, xhi := r.stat(func(r scenario.Result) float64 { return 100 * (r.Amplification - 1) })
		s += fmt.Sprintf("| %s | %.1f [%.1f–%.1f] | %.1f | %.1f | %.2f %% [%.2f–%.2f] | %s |\n", r.stack.name, p, plo, phi, p99, p50, x, xlo, xhi, r.stack.config)
	}
	return s
}
