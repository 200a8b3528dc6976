package scenario

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Stack is what runs a request's calls to the downstream: a resilience
// stack under test, or none. call may be made several times (retries), at
// once (hedges), or not at all (a rejection).
type Stack interface {
	Do(ctx context.Context, call func(context.Context) error) error
}

// StackFunc makes a function a Stack.
type StackFunc func(ctx context.Context, call func(context.Context) error) error

// Do calls f.
func (f StackFunc) Do(ctx context.Context, call func(context.Context) error) error {
	return f(ctx, call)
}

// None is no protection: one call per request.
var None Stack = StackFunc(func(ctx context.Context, call func(context.Context) error) error { return call(ctx) })

// Load is how callers use the downstream.
type Load struct {
	Name string
	// Rate makes an open loop: requests arrive as a Poisson process at
	// this many per second, whatever happens to the earlier ones.
	Rate float64
	// Callers makes a closed loop (with Rate 0): each caller makes a
	// request, and starts the next when it ends and at least Pace after
	// the previous one started.
	Callers int
	Pace    time.Duration
	// Deadline is each request's deadline: the caller's patience.
	Deadline time.Duration
}

// Scenario is a fault over time. The run has a healthy warm-up until
// Start, the fault from Start for Length, and is measured until Start +
// Horizon.
type Scenario struct {
	Name string
	// About says what the fault does, in a phrase (its durations are the
	// unscaled scenario's).
	About  string
	Fault  func(since time.Duration) Fault // since the fault started, for since in [0, Length)
	Start  time.Duration
	Length time.Duration
	// Horizon is how long after Start the run is measured (its headline:
	// successes from the fault's start to Start + Horizon).
	Horizon time.Duration
	// Healed is when, from Start, the downstream itself is healthy again:
	// its own recovery, against which a stack's is judged.
	Healed time.Duration
	// Queue, if not 0, replaces the server's queue length.
	Queue int
	// Unit is the bucket of the timelines and of the recovery and
	// metastability rules (0: a second); Scaled scales it.
	Unit time.Duration

	scale float64 // what Scaled scaled it by (0: 1)
}

// scaledBy is what Scaled scaled the scenario by.
func (sc Scenario) scaledBy() float64 {
	if sc.scale == 0 {
		return 1
	}
	return sc.scale
}

func (sc Scenario) unit() time.Duration {
	if sc.Unit > 0 {
		return sc.Unit
	}
	return time.Second
}

// Cell is one run: a server, a scenario, a load, a seed.
type Cell struct {
	Server   Server
	Scenario Scenario
	Load     Load
	Seed     uint64
	// Network, if not nil, puts a network between the stack and the
	// simulated server: it gets the server's call and returns the one the
	// stack makes (through a real loopback server, say), and what stops it.
	Network func(server func(context.Context) error) (call func(context.Context) error, stop func(), err error)
	// Downstream, if not nil, runs the cell's server somewhere else than
	// in this process (another process: Process): it starts the server the
	// cell describes and returns the call the stack makes, and what stops
	// the server and returns its Record. Network is then not used.
	Downstream func(cell Cell) (call func(context.Context) error, stop func() (Record, error), err error)
	// Record keeps each request's outcome, at its end, in Result.Marks.
	Record bool
}

// Scaled returns the scenario with its timeline — warm-up, fault, horizon,
// and the fault's own changes, a stall of the callers' host among them —
// k times as long; the server's service times and the answers' delays are
// not scaled.
func (sc Scenario) Scaled(k float64) Scenario {
	f := sc.Fault
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * k) }
	sc.Fault = func(since time.Duration) Fault {
		fault := f(time.Duration(float64(since) / k))
		fault.Stall = scale(fault.Stall)
		return fault
	}
	sc.Start, sc.Length, sc.Horizon, sc.Healed, sc.Unit = scale(sc.Start), scale(sc.Length), scale(sc.Horizon), scale(sc.Healed), scale(sc.unit())
	sc.scale = sc.scaledBy() * k
	return sc
}

// FaultWindows returns when, from the run's start, the downstream is
// faulty, as [from, to) windows, sampling the fault every hundredth of the
// timeline's unit.
func (sc Scenario) FaultWindows() [][2]time.Duration {
	var out [][2]time.Duration
	step := sc.unit() / 100
	in := false
	for at := time.Duration(0); at < sc.Length; at += step {
		faulty := sc.Fault(at) != (Fault{})
		switch {
		case faulty && !in:
			out = append(out, [2]time.Duration{sc.Start + at, sc.Start + sc.Length})
		case !faulty && in:
			out[len(out)-1][1] = sc.Start + at
		}
		in = faulty
	}
	return out
}

// start starts the cell's server: its seed, the scenario's queue, and the
// scenario's fault from Start for Length.
func (cell Cell) start() *Sim {
	sc, srv := cell.Scenario, cell.Server
	srv.Seed = cell.Seed
	if sc.Queue > 0 {
		srv.Queue = sc.Queue
	}
	srv.Fault = func(at time.Duration) Fault {
		if at < sc.Start || at >= sc.Start+sc.Length {
			return Fault{}
		}
		return sc.Fault(at - sc.Start)
	}
	return srv.Start()
}

// request is what one request did.
type request struct {
	start, end time.Duration // since the run started
	ok         bool
	calls      int32  // downstream calls it made
	kind       string // with Cell.Record: its Mark's kind
}

// Run runs the cell's load through stack against the cell's server, and
// measures it. It takes its time from the standard library only: run it
// inside a testing/synctest bubble for virtual time (a 75 s run then takes
// a fraction of a second), with the stack made inside the bubble too.
func Run(cell Cell, stack Stack) (Result, error) {
	sc, ld := cell.Scenario, cell.Load
	switch {
	case sc.Fault == nil || sc.Horizon <= 0 || sc.Start <= 0:
		return Result{}, errors.New("scenario: Run needs a Scenario with a Fault, a Start and a Horizon")
	case ld.Deadline <= 0 || (ld.Rate <= 0 && (ld.Callers <= 0 || ld.Pace <= 0)):
		return Result{}, errors.New("scenario: Run needs a Load with a Deadline, and a Rate or Callers and a Pace")
	}
	var downstream func(context.Context) error
	var record func() (Record, error)
	if cell.Downstream != nil {
		call, stop, err := cell.Downstream(cell)
		if err != nil {
			return Result{}, err
		}
		downstream, record = call, stop
	} else {
		sim := cell.start()
		defer sim.Stop()
		downstream = sim.Call
		record = func() (Record, error) { return sim.Record(), nil }
		if cell.Network != nil {
			call, stop, err := cell.Network(sim.Call)
			if err != nil {
				return Result{}, err
			}
			defer stop()
			downstream = call
		}
	}

	t0 := time.Now()
	end := sc.Start + sc.Horizon
	var (
		mu   sync.Mutex
		reqs []request
		wg   sync.WaitGroup
	)
	one := func() {
		defer wg.Done()
		r := request{start: time.Since(t0)}
		ctx, cancel := context.WithTimeout(context.Background(), ld.Deadline)
		var calls atomic.Int32
		err := stack.Do(ctx, func(ctx context.Context) error {
			calls.Add(1)
			return downstream(ctx)
		})
		cancel()
		r.end, r.ok, r.calls = time.Since(t0), err == nil, calls.Load()
		if cell.Record {
			r.kind = markKind(err)
		}
		mu.Lock()
		reqs = append(reqs, r)
		mu.Unlock()
	}
	rng := rand.New(rand.NewPCG(cell.Seed, 0x10ad))
	if ld.Rate > 0 {
		for {
			time.Sleep(time.Duration(rng.ExpFloat64() / ld.Rate * float64(time.Second)))
			if time.Since(t0) >= end {
				break
			}
			wg.Add(1)
			go one()
		}
	} else {
		for c := range ld.Callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Callers start spread over one pace, not all at once.
				time.Sleep(ld.Pace * time.Duration(c) / time.Duration(ld.Callers))
				for time.Since(t0) < end {
					next := time.Now().Add(ld.Pace)
					wg.Add(1)
					one()
					time.Sleep(time.Until(next))
				}
			}()
		}
	}
	wg.Wait()
	rec, err := record()
	if err != nil {
		return Result{}, err
	}
	res := measure(sc, reqs, rec)
	res.Began = t0
	if cell.Record {
		res.Marks = make([]Mark, len(reqs))
		for i, r := range reqs {
			res.Marks[i] = Mark{At: r.end, Kind: r.kind}
		}
		slices.SortFunc(res.Marks, func(a, b Mark) int { return cmp.Compare(a.At, b.At) })
	}
	return res, nil
}
