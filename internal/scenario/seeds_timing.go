package scenario

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// The drivers of SEEDS C2 (a hung downstream), C3 (retrying into an open
// breaker) and C4 (a timeout below the tail).
//
// Each result describes its chain twice: Chain and Findings at the seed's
// own durations (what the tables speak of, and what the lint says of it),
// RunChain as it ran (every duration × the scale).

// atSeed is the description and the lint's findings of the chain ps make.
func atSeed(ps []chain.Policy) (string, []chain.Finding, error) {
	c, err := chain.New(ps...)
	if err != nil {
		return "", nil, err
	}
	return c.String(), c.Findings(), nil
}

// ReactionResult is SEEDS C2, run once.
type ReactionResult struct {
	Open     time.Duration   // time to open, in the seed's time
	Calls    int             // calls that reached the downstream
	Held     time.Duration   // caller time held by those calls, in the seed's time
	Findings []chain.Finding // the lint's, for the chain at the seed's durations
	Chain    string          // the chain at the seed's durations
	RunChain string          // the chain as run, its durations scaled
	Marks    []Mark
	Events   []Event
}

// Reaction is SEEDS C2: the downstream hangs; a breaker on 5 consecutive
// failures with an attempt timeout of attempt inside it; callers keep
// calling until it opens.
func Reaction(proto string, attempt time.Duration, callers int, scale float64) (ReactionResult, error) {
	target, err := NewTarget(proto, func(int64, time.Duration) Answer { return Answer{Hang: true} })
	if err != nil {
		return ReactionResult{}, err
	}
	defer target.Close()
	rec := newRecorder(scale)
	var res ReactionResult
	seed, err := reactionPolicies(attempt, 1, nil)
	if err != nil {
		return res, err
	}
	if res.Chain, res.Findings, err = atSeed(seed); err != nil {
		return res, err
	}
	ps, err := reactionPolicies(attempt, scale, rec.state)
	if err != nil {
		return res, err
	}
	c, do, err := through(target, ps...)
	if err != nil {
		return res, err
	}
	var held atomic.Int64
	var wg sync.WaitGroup
	rec.start = time.Now()
	for range callers {
		wg.Go(func() {
			for {
				t0 := time.Now()
				err := do(context.Background())
				rec.mark(err)
				if errors.Is(err, breaker.ErrOpen) {
					return
				}
				held.Add(int64(time.Since(t0)))
			}
		})
	}
	wg.Wait()
	for _, e := range rec.events {
		if e.To == breaker.StateOpen {
			res.Open = e.At
			break
		}
	}
	res.Calls = int(target.Received())
	res.Held = time.Duration(float64(held.Load()) / scale)
	res.RunChain, res.Marks, res.Events = c.String(), rec.marks, rec.events
	return res, nil
}

// reactionPolicies are C2's breaker and attempt timeout, scaled.
func reactionPolicies(attempt time.Duration, scale float64, onState func(from, to breaker.State)) ([]chain.Policy, error) {
	b, err := breaker.New(breaker.Settings{ConsecutiveFailures: 5, HalfOpenProbes: 3, OpenTimeout: time.Hour, OnStateChange: onState})
	if err != nil {
		return nil, err
	}
	to, err := timeout.New(scaled(attempt, scale))
	if err != nil {
		return nil, err
	}
	return []chain.Policy{b, to}, nil
}

// IntoOpenResult is SEEDS C3, run once.
type IntoOpenResult struct {
	Median, P99 time.Duration   // in the seed's time
	Findings    []chain.Finding // the lint's, for the chain at the seed's durations
	Chain       string          // the chain at the seed's durations
	RunChain    string          // the chain as run, its durations scaled
}

// IntoOpen is SEEDS C3: with the breaker open, requests of 3 attempts
// (backoff 125 ms, 250 ms) that keep retrying ErrOpen (whenOpen) or give up
// at once.
func IntoOpen(proto string, whenOpen bool, requests int, scale float64) (IntoOpenResult, error) {
	target, err := NewTarget(proto, func(int64, time.Duration) Answer { return Answer{Fail: true} })
	if err != nil {
		return IntoOpenResult{}, err
	}
	defer target.Close()
	var res IntoOpenResult
	seed, err := intoOpenPolicies(whenOpen, 1)
	if err != nil {
		return res, err
	}
	if res.Chain, res.Findings, err = atSeed(seed); err != nil {
		return res, err
	}
	ps, err := intoOpenPolicies(whenOpen, scale)
	if err != nil {
		return res, err
	}
	c, do, err := through(target, ps...)
	if err != nil {
		return res, err
	}
	lat := make([]time.Duration, 0, requests)
	for range requests {
		t0 := time.Now()
		_ = do(context.Background())
		lat = append(lat, time.Duration(float64(time.Since(t0))/scale))
	}
	slices.Sort(lat)
	res.Median, res.P99, res.RunChain = quantile(lat, 0.5), quantile(lat, 0.99), c.String()
	return res, nil
}

// intoOpenPolicies are C3's retry and breaker, scaled; the breaker is open.
func intoOpenPolicies(whenOpen bool, scale float64) ([]chain.Policy, error) {
	b, err := breaker.New(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour})
	if err != nil {
		return nil, err
	}
	_ = b.Do(context.Background(), func(context.Context) error { return ErrDownstream }) // opens it
	opts := []retry.Option{retry.MaxAttempts(3), retry.Exponential(scaled(125*time.Millisecond, scale), scaled(time.Second, scale)), retry.Jitter(0)}
	if whenOpen {
		opts = append(opts, retry.RetryWhenOpen())
	}
	r, err := retry.New(opts...)
	if err != nil {
		return nil, err
	}
	return []chain.Policy{r, b}, nil
}

// TailResult is SEEDS C4, run once.
type TailResult struct {
	Opens                      int
	Open                       time.Duration   // time spent open, in the seed's time
	Made                       int             // calls the callers made: one Mark each
	Rejected                   int             // of those, refused by the open breaker, never sent
	Sent, OK, TimedOut, Wasted int             // calls the downstream received; answered in time; timed out; work it did for a caller gone
	Findings                   []chain.Finding // the lint's, for the chain at the seed's durations
	Chain                      string          // the chain at the seed's durations
	RunChain                   string          // the chain as run, its durations scaled
	Marks                      []Mark
	Events                     []Event
}

// Tail is SEEDS C4: a healthy downstream whose answers take 10–100 ms,
// 20 % of them 100 ms–1 s, deaf to callers that gave up; 20 callers for
// 20 s; a breaker on 10 % of the last 50 calls that opens for 1 s and then
// closes with its window cleared; an attempt timeout of attempt, declared
// against the healthy latency.
func Tail(proto string, attempt time.Duration, scale float64, seed uint64) (TailResult, error) {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 4))
	target, err := NewTarget(proto, func(int64, time.Duration) Answer {
		mu.Lock()
		defer mu.Unlock()
		d := 10*time.Millisecond + time.Duration(rng.Int64N(int64(90*time.Millisecond)))
		if rng.Float64() < 0.2 {
			d = 100*time.Millisecond + time.Duration(rng.Int64N(int64(900*time.Millisecond)))
		}
		return Answer{Delay: scaled(d, scale), Deaf: true}
	})
	if err != nil {
		return TailResult{}, err
	}
	defer target.Close()
	rec := newRecorder(scale)
	var res TailResult
	var openedAt time.Duration
	_, unscaled, err := tailPolicies(attempt, 1, nil)
	if err != nil {
		return res, err
	}
	if res.Chain, res.Findings, err = atSeed(unscaled); err != nil {
		return res, err
	}
	b, ps, err := tailPolicies(attempt, scale, func(from, to breaker.State) {
		rec.state(from, to)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case to == breaker.StateOpen:
			res.Opens++
			openedAt = rec.since()
		case from == breaker.StateOpen:
			res.Open += rec.since() - openedAt
		}
	})
	if err != nil {
		return res, err
	}
	c, do, err := through(target, ps...)
	if err != nil {
		return res, err
	}
	var made, rejected, okN, timedOut atomic.Int64
	rec.start = time.Now()
	end := rec.start.Add(scaled(20*time.Second, scale))
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for time.Now().Before(end) {
				err := do(context.Background())
				rec.mark(err)
				made.Add(1)
				switch {
				case err == nil:
					okN.Add(1)
				case errors.Is(err, breaker.ErrOpen):
					rejected.Add(1)
					time.Sleep(scaled(10*time.Millisecond, scale))
				case timeout.Expired(err):
					timedOut.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// State may move the breaker on (an open stay just over) and call the
	// receiver above, which takes mu: read it before taking mu.
	st := b.State()
	mu.Lock()
	if st == breaker.StateOpen {
		res.Open += rec.since() - openedAt
	}
	mu.Unlock()
	target.Close() // the deaf work still running finishes and is counted
	res.Made, res.Rejected = int(made.Load()), int(rejected.Load())
	res.Sent, res.OK, res.TimedOut, res.Wasted = int(target.Received()), int(okN.Load()), int(timedOut.Load()), int(target.Wasted())
	res.RunChain, res.Marks, res.Events = c.String(), rec.marks, rec.events
	return res, nil
}

// tailPolicies are C4's breaker and attempt timeout (the healthy latency
// declared), scaled, in the chain's order; and the breaker.
func tailPolicies(attempt time.Duration, scale float64, onState func(from, to breaker.State)) (*breaker.Breaker, []chain.Policy, error) {
	b, err := breaker.New(breaker.Settings{
		FailureRate: 0.1, WindowCalls: 50, OpenTimeout: scaled(time.Second, scale), SkipHalfOpen: true, OnStateChange: onState,
	})
	if err != nil {
		return nil, nil, err
	}
	to, err := timeout.New(scaled(attempt, scale), timeout.Latency(0.8, scaled(100*time.Millisecond, scale)), timeout.Latency(1, scaled(time.Second, scale)))
	if err != nil {
		return nil, nil, err
	}
	return b, []chain.Policy{b, to}, nil
}
