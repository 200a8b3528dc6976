package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/callguard/callguard/breaker"
)

// Recovery is SEEDS A's unstable-recovery experiment: a breaker has just
// opened, and the downstream now succeeds with probability SuccessRate. A
// call arrives every Interval. How long from the first half-open to closed,
// and how many re-opens on the way?
type Recovery struct {
	SuccessRate float64       // q: each downstream call succeeds with this probability
	Probes      int           // HalfOpenProbes
	Successes   int           // HalfOpenSuccesses (0: = Probes)
	OpenTimeout time.Duration // the breaker's open stay
	Interval    time.Duration // time between calls
	Horizon     time.Duration // a trial that has not closed by then ends
	Trials      int
	Seed        uint64
}

// RecoveryResult summarizes the trials. Durations of trials that never
// closed count as the horizon (and are counted in NeverClosed).
type RecoveryResult struct {
	Median, P90 time.Duration
	MeanReopens float64
	FirstRound  float64 // share of trials that closed without a re-open
	NeverClosed int
	Trials      int
}

func (r RecoveryResult) String() string {
	f := func(d time.Duration, never bool) string {
		if never {
			return fmt.Sprintf("≥ %.0f s", d.Seconds())
		}
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("median %s / p90 %s / %.1f re-opens [first %.3f]",
		f(r.Median, r.MedianNeverClosed()), f(r.P90, r.P90NeverClosed()), r.MeanReopens, r.FirstRound)
}

// MedianNeverClosed reports that at least half the trials never closed.
func (r RecoveryResult) MedianNeverClosed() bool { return 2*r.NeverClosed >= r.Trials }

// P90NeverClosed reports that at least a tenth of the trials never closed.
func (r RecoveryResult) P90NeverClosed() bool { return 10*r.NeverClosed >= r.Trials }

var errFlaky = errors.New("scenario: flaky downstream failed")

// RunRecovery runs the trials one after another with a seeded generator.
func RunRecovery(cfg Recovery) (RecoveryResult, error) {
	if cfg.Trials <= 0 || cfg.Interval <= 0 || cfg.Horizon <= 0 {
		return RecoveryResult{}, errors.New("scenario: Recovery needs Trials, Interval and Horizon > 0")
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Probes)<<32|uint64(cfg.Successes)))
	times := make([]time.Duration, 0, cfg.Trials)
	res := RecoveryResult{Trials: cfg.Trials}
	reopens := 0
	for range cfg.Trials {
		d, n, closed, err := recoveryTrial(cfg, rng)
		if err != nil {
			return res, err
		}
		if !closed {
			res.NeverClosed++
		}
		times = append(times, d)
		reopens += n
		if closed && n == 0 {
			res.FirstRound++
		}
	}
	slices.Sort(times)
	res.Median = quantile(times, 0.5)
	res.P90 = quantile(times, 0.9)
	res.MeanReopens = float64(reopens) / float64(cfg.Trials)
	res.FirstRound /= float64(cfg.Trials)
	return res, nil
}

// quantile is the nearest-rank quantile of sorted values.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func recoveryTrial(cfg Recovery, rng *rand.Rand) (d time.Duration, reopens int, closed bool, err error) {
	var firstHalfOpen, closedAt time.Time
	b, err := breaker.New(breaker.Settings{
		ConsecutiveFailures: 1,
		OpenTimeout:         cfg.OpenTimeout,
		HalfOpenProbes:      cfg.Probes,
		HalfOpenSuccesses:   cfg.Successes,
		OnStateChange: func(from, to breaker.State) {
			switch {
			case to == breaker.StateHalfOpen && firstHalfOpen.IsZero():
				firstHalfOpen = time.Now()
			case from == breaker.StateHalfOpen && to == breaker.StateOpen:
				reopens++
			case to == breaker.StateClosed:
				closedAt = time.Now()
			}
		},
	})
	if err != nil {
		return 0, 0, false, err
	}
	ctx := context.Background()
	start := time.Now()
	_ = b.Do(ctx, func(context.Context) error { return errFlaky }) // opens it
	for closedAt.IsZero() && time.Since(start) < cfg.Horizon {
		time.Sleep(cfg.Interval)
		_ = b.Do(ctx, func(context.Context) error {
			if rng.Float64() < cfg.SuccessRate {
				return nil
			}
			return errFlaky
		})
	}
	if closedAt.IsZero() {
		return cfg.Horizon, reopens, false, nil
	}
	return closedAt.Sub(firstHalfOpen), reopens, true, nil
}
