package callguard_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// phase is a stretch of a scenario in which each answer hangs with
// probability hang.
type phase struct {
	d    time.Duration
	hang float64
}

// phaseRun is what the canonical chain did during one phase.
type phaseRun struct {
	from, to       time.Duration   // the attempt timeout when the phase began and ended
	opens          []time.Duration // when the breaker opened, from the phase's start
	listen         time.Duration   // when it first admitted calls in the phase (closed or half-open), or -1
	requests       int             // requests started in the phase
	ok             int             // of which succeeded
	rejected       int             // of which the breaker rejected at once
	hangFailed     int             // of which failed on hung attempts: attempts or deadline used up
	hung           int             // attempts that hung
	byOurs         int             // of which the attempt timeout ended
	byOverall      int             // of which the overall deadline ended
	earlyByOverall int             // of which first or second attempts the overall deadline ended
}

// runPhases drives the canonical chain, overall timeout 1 s → retry(3,
// Exponential 50 ms…, Jitter(0)) → breaker(5 consecutive failures, open
// 5 s) → attempt, with 20 callers in a closed loop through the phases. An
// answer that does not hang takes a lognormal time, p50 20 ms and p99.9
// 200 ms, so that an adaptive timeout settles near 300 ms. A caller the
// breaker rejects waits 50 ms before its next request. With attempt nil,
// the chain is the overall timeout alone.
func runPhases(t *testing.T, attempt *timeout.Policy, seed uint64, phases ...phase) []phaseRun {
	res := make([]phaseRun, len(phases))
	for i := range res {
		res[i].listen = -1
	}
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		start := time.Now()
		bounds := make([]time.Time, len(phases)+1) // phase i is [bounds[i], bounds[i+1])
		bounds[0] = start
		for i, p := range phases {
			bounds[i+1] = bounds[i].Add(p.d)
		}
		at := func(now time.Time) int { // the phase at now, or len(phases) after the last
			for i := range phases {
				if now.Before(bounds[i+1]) {
					return i
				}
			}
			return len(phases)
		}
		b, err := breaker.New(breaker.Settings{
			ConsecutiveFailures: 5, OpenTimeout: 5 * time.Second,
			OnStateChange: func(from, to breaker.State) {
				now := time.Now()
				i := at(now)
				if i == len(phases) {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case to == breaker.StateOpen:
					res[i].opens = append(res[i].opens, now.Sub(bounds[i]))
				case res[i].listen < 0:
					res[i].listen = now.Sub(bounds[i])
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		overall, err := timeout.New(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		r, err := retry.New(retry.MaxAttempts(3), retry.Exponential(50*time.Millisecond, time.Second), retry.Jitter(0))
		if err != nil {
			t.Fatal(err)
		}
		policies := []chain.Policy{overall}
		if attempt != nil {
			policies = append(policies, r, b, attempt)
		}
		c, err := chain.New(policies...)
		if err != nil {
			t.Fatal(err)
		}
		const z999 = 3.090232306167813 // the standard normal's 0.999 quantile
		sigma := math.Log(10) / z999
		var wg sync.WaitGroup
		for i := range 20 {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			wg.Go(func() {
				for {
					ph := at(time.Now())
					if ph == len(phases) {
						return
					}
					deadline := time.Now().Add(time.Second) // the overall timeout's
					n := 0                                  // attempts made
					err := c.Do(context.Background(), func(ctx context.Context) error {
						n++
						i := at(time.Now())
						hang := i < len(phases) && rng.Float64() < phases[i].hang
						lat := time.Duration(float64(20*time.Millisecond) * math.Exp(sigma*rng.NormFloat64()))
						if hang {
							<-ctx.Done()
							dl, _ := ctx.Deadline()
							mu.Lock()
							res[i].hung++
							switch {
							case !dl.Equal(deadline):
								res[i].byOurs++
							case n < 3:
								res[i].earlyByOverall++
								fallthrough
							default:
								res[i].byOverall++
							}
							mu.Unlock()
							return ctx.Err()
						}
						tm := time.NewTimer(lat)
						defer tm.Stop()
						select {
						case <-tm.C:
							return nil
						case <-ctx.Done():
							return ctx.Err()
						}
					})
					var ex *retry.ExhaustedError
					mu.Lock()
					res[ph].requests++
					switch {
					case err == nil:
						res[ph].ok++
					case errors.Is(err, breaker.ErrOpen) && !errors.As(err, &ex):
						res[ph].rejected++
					case !errors.As(err, &ex) || ex.Reason == retry.ReasonAttempts || ex.Reason == retry.ReasonDeadline:
						res[ph].hangFailed++
					}
					mu.Unlock()
					if errors.Is(err, breaker.ErrOpen) {
						time.Sleep(50 * time.Millisecond)
					}
				}
			})
		}
		for i := range phases {
			time.Sleep(time.Until(bounds[i]))
			st := b.State() // may move b on and call OnStateChange, which takes mu
			mu.Lock()
			if st != breaker.StateOpen && res[i].listen < 0 {
				res[i].listen = 0
			}
			mu.Unlock()
			if attempt != nil {
				res[i].from = attempt.Timeout()
				if i > 0 {
					res[i-1].to = res[i].from
				}
			}
		}
		wg.Wait()
		if attempt != nil {
			res[len(phases)-1].to = attempt.Timeout()
		}
	})
	return res
}

// share is n / of as a percentage.
func share(n, of int) float64 { return 100 * float64(n) / float64(max(of, 1)) }

func (r phaseRun) String() string {
	return fmt.Sprintf("attempt timeout %v → %v; admitting from %v, %d opens at %v; %d requests: %d OK (%.1f %%), %d rejected, %d failed on hangs (%.2f %% of those admitted); %d hung attempts: %d ended by the attempt timeout, %d by the overall deadline (%d of them first or second attempts)",
		r.from, r.to, r.listen, len(r.opens), r.opens, r.requests, r.ok, share(r.ok, r.requests), r.rejected, r.hangFailed, share(r.hangFailed, r.requests-r.rejected),
		r.hung, r.byOurs, r.byOverall, r.earlyByOverall)
}

func attemptTimeouts(t *testing.T) (fixed, adaptive *timeout.Policy) {
	t.Helper()
	fixed, err := timeout.New(300 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	adaptive, err = timeout.New(300*time.Millisecond, timeout.Adaptive(timeout.AdaptiveOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	return fixed, adaptive
}

// detection is how long the breaker took to open during a phase once it
// admitted calls, or -1 if it never opened after that.
func (r phaseRun) detection() time.Duration {
	for _, o := range r.opens {
		if r.listen >= 0 && o >= r.listen {
			return o - r.listen
		}
	}
	return -1
}

// TestAdaptiveBlackholeOpensBreaker: after a
// healthy warm-up, a 30 s blackhole; and the same blackhole after 30 s in
// which 20 % of the answers hang. With the adaptive attempt timeout the
// breaker must open as with the fixed one: as soon after it begins to
// admit calls, within one attempt timeout, and as often, within ±1.
// Before, each attempt the timeout cut raised the adaptive timeout; past
// the overall 1 s deadline, hung attempts ended on the caller's deadline,
// the breaker no longer counted them, and through the blackhole after the
// hangs it never opened. (Straight after the warm-up the breaker, opening
// on the first 5 hangs, kept the cut attempts too few to raise the
// timeout much: 302–327 ms became 302–503 ms, and it opened as often.)
func TestAdaptiveBlackholeOpensBreaker(t *testing.T) {
	for _, tc := range []struct {
		name   string
		phases []phase
	}{
		{"after a healthy warm-up", []phase{{20 * time.Second, 0}, {30 * time.Second, 1}}},
		{"after 20 % of hangs", []phase{{20 * time.Second, 0}, {30 * time.Second, 0.2}, {30 * time.Second, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fixedT, adaptiveT := attemptTimeouts(t)
			last := len(tc.phases) - 1
			fixed := runPhases(t, fixedT, 7, tc.phases...)[last]
			adaptive := runPhases(t, adaptiveT, 7, tc.phases...)[last]
			t.Logf("blackhole, fixed: %v", fixed)
			t.Logf("blackhole, adaptive: %v", adaptive)
			fd, ad := fixed.detection(), adaptive.detection()
			if fd < 0 || ad < 0 {
				t.Fatalf("got the breaker opening %v after it admitted calls with the fixed timeout and %v with the adaptive one (-1: never), want both to open", fd, ad)
			}
			if (ad - fd).Abs() > fixed.from {
				t.Errorf("got the breaker opening %v after it admitted calls with the adaptive timeout and %v with the fixed one, want within one attempt timeout (%v)", ad, fd, fixed.from)
			}
			if n, m := len(adaptive.opens), len(fixed.opens); n < m-1 || n > m+1 {
				t.Errorf("got %d opens with the adaptive timeout and %d with the fixed one, want within ±1", n, m)
			}
			if adaptive.to != adaptive.from {
				t.Errorf("got an adaptive timeout of %v after the blackhole, want %v, where it began", adaptive.to, adaptive.from)
			}
		})
	}
}

// TestAdaptiveHangsInChain: 20 % of the answers hanging
// for 30 s after a healthy warm-up. The adaptive attempt timeout must
// protect as the fixed one does: hung attempts are ended by the attempt
// timeout, so that the retry tries again, and a first or second attempt by
// the overall deadline only when it was the timeout's scout (see
// timeout.Adaptive); and of the requests the breaker admits,
// no larger share fails on hangs (used up attempts or deadline; within 3
// standard errors). Before, the adaptive timeout grew past the overall
// deadline, and a request with a hung attempt failed as without a chain.
//
// Raw successes are logged, not compared: with 20 callers in a closed loop
// the hangs soon hold most callers (300 ms against 20 ms answers), the
// breaker opens on 5 hangs ending together, and it recloses only when its
// 3 probes all answer (0.8³ ≈ 0.51); how long it stays open is chance,
// with either timeout.
func TestAdaptiveHangsInChain(t *testing.T) {
	phases := []phase{{20 * time.Second, 0}, {30 * time.Second, 0.2}}
	fixedT, adaptiveT := attemptTimeouts(t)
	fixed := runPhases(t, fixedT, 7, phases...)[1]
	adaptive := runPhases(t, adaptiveT, 7, phases...)[1]
	none := runPhases(t, nil, 7, phases...)[1]
	t.Logf("fixed: %v", fixed)
	t.Logf("adaptive: %v", adaptive)
	t.Logf("no chain, the overall timeout alone: %v", none)
	// The timeout cuts a fifth of the attempts, more than its quantile
	// allows: in doubt, it lets one attempt at a time run to its ceiling
	// (where the overall deadline ends it), resting 100 ms, 200 ms, … up
	// to its window (60 s) after each that hangs; the breaker's probes
	// meet such scouts too. A scout that hangs costs its request its
	// retries: a few requests in the 30 s, not a share of them.
	if adaptive.earlyByOverall > 20 || 10*adaptive.byOurs < 9*adaptive.hung {
		t.Errorf("got %d of %d hung attempts ended by the attempt timeout and %d first or second attempts by the overall deadline, want 90 %% the former and at most 20 of the latter (the scouts)", adaptive.byOurs, adaptive.hung, adaptive.earlyByOverall)
	}
	// The two shares of admitted requests failed on hangs, and the
	// standard error of their difference.
	n1, n2 := float64(fixed.requests-fixed.rejected), float64(adaptive.requests-adaptive.rejected)
	p1, p2 := float64(fixed.hangFailed)/n1, float64(adaptive.hangFailed)/n2
	pooled := float64(fixed.hangFailed+adaptive.hangFailed) / (n1 + n2)
	se := math.Sqrt(pooled * (1 - pooled) * (1/n1 + 1/n2))
	if p2-p1 > 3*se {
		t.Errorf("got %.2f %% of admitted requests failing on hangs with the adaptive timeout and %.2f %% with the fixed one, want no more (within 3 standard errors, %.2f %%)", 100*p2, 100*p1, 300*se)
	}
}
