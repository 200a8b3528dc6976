package scenario

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// The drivers of SEEDS A and C, shared by the tests (an in-process target
// in virtual time) and the lab (HTTP and gRPC targets over loopback, in
// real time). Every duration of an experiment is multiplied by Scale (1:
// the seed's own), and every duration it reports is divided by it, so that
// its numbers read as the seed's.

// Event is a breaker's state change at a time since the experiment
// started, in the seed's time (divided by the scale).
type Event struct {
	At       time.Duration
	From, To breaker.State
}

// Mark is something that happened to one request, for timelines: kind is
// "ok", "failure", "rejected" or "timeout".
type Mark struct {
	At   time.Duration
	Kind string
}

// recorder collects a breaker's events and the requests' marks.
type recorder struct {
	mu     sync.Mutex
	start  time.Time
	scale  float64
	events []Event
	marks  []Mark
}

func newRecorder(scale float64) *recorder { return &recorder{start: time.Now(), scale: scale} }

func (r *recorder) since() time.Duration {
	return time.Duration(float64(time.Since(r.start)) / r.scale)
}

func (r *recorder) state(from, to breaker.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, Event{At: r.since(), From: from, To: to})
}

func (r *recorder) mark(err error) {
	kind := markKind(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.marks = append(r.marks, Mark{At: r.since(), Kind: kind})
}

// markKind is the Mark kind of a request that returned err.
func markKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, breaker.ErrOpen):
		return "rejected"
	case timeout.Expired(err) || errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "failure"
}

func scaled(d time.Duration, scale float64) time.Duration {
	return time.Duration(float64(d) * scale)
}

// TransitionsResult is SEEDS A's script, run once.
type TransitionsResult struct {
	Events                                      []Event
	Calls, Reached, FailedReached, Open, Probes int
	Marks                                       []Mark
	FaultWindows                                [][2]time.Duration
}

// Transitions is SEEDS A's script: a call every 50 ms for 160 calls, the
// downstream failing in [500 ms, 2000 ms) and [4000 ms, 5500 ms); a breaker
// that trips on 5 consecutive failures, admits 3 probes and stays open
// 1025 ms, on engine.
func Transitions(proto string, engine breaker.Engine, scale float64) (TransitionsResult, error) {
	windows := [][2]time.Duration{{500 * time.Millisecond, 2000 * time.Millisecond}, {4000 * time.Millisecond, 5500 * time.Millisecond}}
	failing := func(at time.Duration) bool {
		for _, w := range windows {
			if at >= scaled(w[0], scale) && at < scaled(w[1], scale) {
				return true
			}
		}
		return false
	}
	var failedReached atomic.Int64
	target, err := NewTarget(proto, func(_ int64, at time.Duration) Answer {
		f := failing(at)
		if f {
			failedReached.Add(1)
		}
		return Answer{Fail: f}
	})
	if err != nil {
		return TransitionsResult{}, err
	}
	defer target.Close()
	rec := newRecorder(scale)
	b, err := breaker.New(breaker.Settings{
		Engine: engine, ConsecutiveFailures: 5, HalfOpenProbes: 3,
		OpenTimeout: scaled(1025*time.Millisecond, scale), OnStateChange: rec.state,
	})
	if err != nil {
		return TransitionsResult{}, err
	}
	_, do, err := through(target, b)
	if err != nil {
		return TransitionsResult{}, err
	}
	// The target's clock and the recorder's start together: restart both.
	rec.start = time.Now()
	resetStart(target, rec.start)
	interval := scaled(50*time.Millisecond, scale)
	for k := range 160 {
		time.Sleep(time.Until(rec.start.Add(time.Duration(k) * interval)))
		rec.mark(do(context.Background()))
	}
	cn := b.Counts()
	return TransitionsResult{
		Events: rec.events, Marks: rec.marks, Calls: 160, Reached: int(target.Received()),
		FailedReached: int(failedReached.Load()), Open: int(cn.RejectedOpen), Probes: int(cn.RejectedProbes),
		FaultWindows: windows,
	}, nil
}

// resetStart sets the time a target's downstream counts from.
func resetStart(t Target, start time.Time) {
	switch t := t.(type) {
	case *inProcess:
		t.clock.reset(start)
	case *httpTarget:
		t.clock.reset(start)
	case *grpcTarget:
		t.clock.reset(start)
	}
}

// ProbesResult is SEEDS A's probe count, run once.
type ProbesResult struct {
	Opens, HalfOpens, FailedProbes int
	Marks                          []Mark
	Events                         []Event
}

// Probes is SEEDS A's probe count: callers concurrent callers against a
// downstream that fails (each failure taking 20 ms) until the breaker has
// opened 3 times; a breaker on 5 consecutive failures with n probes, open
// 150 ms. The failed probes are those that reached the downstream in
// half-open and failed.
func Probes(proto string, n, callers int, scale float64) (ProbesResult, error) {
	var healthy atomic.Bool
	target, err := NewTarget(proto, func(int64, time.Duration) Answer {
		if healthy.Load() {
			return Answer{}
		}
		return Answer{Fail: true, Delay: scaled(20*time.Millisecond, scale)}
	})
	if err != nil {
		return ProbesResult{}, err
	}
	defer target.Close()
	rec := newRecorder(scale)
	var res ProbesResult
	recovered := make(chan struct{})
	var once sync.Once
	b, err := breaker.New(breaker.Settings{
		ConsecutiveFailures: 5, HalfOpenProbes: n, OpenTimeout: scaled(150*time.Millisecond, scale),
		OnStateChange: func(from, to breaker.State) {
			rec.state(from, to)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			switch {
			case to == breaker.StateOpen:
				res.Opens++
				if res.Opens == 3 {
					healthy.Store(true)
				}
			case to == breaker.StateHalfOpen:
				res.HalfOpens++
			case to == breaker.StateClosed && res.Opens >= 3:
				once.Do(func() { close(recovered) })
			}
		},
	})
	if err != nil {
		return ProbesResult{}, err
	}
	_, do, err := through(target, b)
	if err != nil {
		return ProbesResult{}, err
	}
	deadline := time.After(scaled(10*time.Second, scale))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range callers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := do(context.Background())
				rec.mark(err)
				if errors.Is(err, breaker.ErrOpen) {
					time.Sleep(scaled(5*time.Millisecond, scale))
				}
			}
		})
	}
	select {
	case <-recovered:
	case <-deadline:
	}
	close(stop)
	wg.Wait()
	res.FailedProbes = int(b.Counts().ProbeFailures)
	res.Marks, res.Events = rec.marks, rec.events
	if res.Opens < 3 {
		return res, errors.New("scenario: the breaker did not open 3 times within the experiment's bound")
	}
	return res, nil
}

// RetryOrderResult is SEEDS C1, run once.
type RetryOrderResult struct {
	OpenedAfter, Reached, Calls, Rejected int
	Findings                              []chain.Finding
	Chain                                 string
}

// RetryOrder is SEEDS C1: the downstream always fails, 12 logical
// requests of 3 attempts each, a breaker on 5 consecutive failures, the
// retry inside it (retryOutside false) or outside it.
func RetryOrder(proto string, retryOutside bool) (RetryOrderResult, error) {
	target, err := NewTarget(proto, func(int64, time.Duration) Answer { return Answer{Fail: true} })
	if err != nil {
		return RetryOrderResult{}, err
	}
	defer target.Close()
	var res RetryOrderResult
	request := 0
	b, err := breaker.New(breaker.Settings{
		ConsecutiveFailures: 5, HalfOpenProbes: 3, OpenTimeout: time.Minute,
		OnStateChange: func(_, to breaker.State) {
			if to == breaker.StateOpen && res.OpenedAfter == 0 {
				res.OpenedAfter = request
			}
		},
	})
	if err != nil {
		return res, err
	}
	r, err := retry.New(retry.MaxAttempts(3), retry.Constant(10*time.Millisecond), retry.Jitter(0))
	if err != nil {
		return res, err
	}
	order := []chain.Policy{b, r}
	if retryOutside {
		order = []chain.Policy{r, b}
	}
	c, do, err := through(target, order...)
	if err != nil {
		return res, err
	}
	for request = 1; request <= 12; request++ {
		before := target.Received()
		_ = do(context.Background())
		if target.Received() > before {
			res.Reached++
		}
	}
	res.Calls, res.Rejected = int(target.Received()), int(b.Counts().RejectedOpen)
	res.Findings, res.Chain = c.Findings(), c.String()
	return res, nil
}
