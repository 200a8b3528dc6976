package endpoints

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/callguard/callguard/internal/scenario"
)

// kase is one case: a fault of backend #0 (or of every backend, all) on
// one protocol.
type kase struct {
	proto string
	fault mode
	all   bool
}

func (c kase) name() string {
	if c.all {
		return c.proto + "/all-fail"
	}
	return c.proto + "/" + modeNames[c.fault]
}

// short names the fault in a table's row.
func (c kase) short() string {
	switch {
	case c.all:
		return "all ten fail"
	case c.fault == modeFail:
		return "fails every call"
	case c.fault == modeHang:
		return "hangs"
	case c.fault == modeSlow:
		return fmt.Sprintf("slow (×%d: %v)", slowBy, slowBy*service)
	case c.fault == modeFlap:
		return fmt.Sprintf("flaps (%v bad, %v good)", flapHalf, flapHalf)
	}
	return "?"
}

// about says what the case does, for the report.
func (c kase) about() string {
	fail := "UNAVAILABLE"
	if c.proto == "http" {
		fail = "503"
	}
	switch {
	case c.all:
		return "all ten backends answer every call with " + fail + " at once"
	case c.fault == modeFail:
		return "backend #0 answers every call with " + fail + " at once"
	case c.fault == modeHang:
		return "backend #0 answers nothing: each request waits until its context ends (the client's deadline or cancellation)"
	case c.fault == modeSlow:
		return fmt.Sprintf("backend #0 answers after %v instead of %v (×%d)", slowBy*service, service, slowBy)
	case c.fault == modeFlap:
		return fmt.Sprintf("backend #0 flaps: it answers every call with %s for %v, then serves for %v, and again", fail, flapHalf, flapHalf)
	}
	return "?"
}

// armNames are the case's arms: a protocol's arms for one bad backend;
// today's Standard and Standard with the per-endpoint policy (both
// retrying: gRPC idempotent, HTTP GET) when every backend fails.
func (c kase) armNames() []string {
	switch {
	case c.all && c.proto == "grpc":
		return []string{armStdIdem, armEpIdem}
	case c.all:
		return []string{armStdGet, armEpGet}
	}
	return armsOf(c.proto)
}

// caseRun is what one run of a case measured.
type caseRun struct {
	c       kase
	names   []string         // the arms that ran
	skipped []string         // the arms not built in this tree
	calls   [][]call         // by arm
	errs    []map[string]int // by arm: the bad phase's errors, by message
	// arrivals: by arm, by backend (#0 first), sorted, on the case's clock.
	arrivals [][][]time.Duration
	addr0    []string          // by arm: backend #0's address
	opens    [][]time.Duration // by arm: the per-method / per-host breaker's openings
	changes  [][]change        // by arm: the per-endpoint policy's changes
	most     []int             // by arm: the most endpoints ejected at once, by its changes
	polled   []int             // by arm: the most endpoints ejected at once, by Statuses every 10 ms (-1: no Statuses)
	bad      time.Duration     // the fault's start, on the case's clock
	heal     time.Duration     // the heal
	end      time.Duration     // the last call started before it
	clock    time.Time
	noise    [phases]scenario.Noise
}

// runCase runs c: every arm with its own ten backends, side by side,
// healthy for tm.warm, backend #0 (or all) bad for tm.bad, healed for
// tm.healed.
func runCase(c kase, tm timing) (_ *caseRun, err error) {
	clock := time.Now()
	run := &caseRun{c: c, clock: clock}
	var arms []*arm
	var fleets []*fleet
	defer func() {
		for _, a := range arms {
			a.close()
		}
		for _, f := range fleets {
			f.stop()
		}
	}()
	for _, n := range c.armNames() {
		f, err := startFleet(c.proto, clock)
		if err != nil {
			return nil, err
		}
		fleets = append(fleets, f)
		a, err := newArm(c.proto, n, f)
		if errors.Is(err, errNotBuilt) {
			run.skipped = append(run.skipped, n)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("endpoints: %s: arm %s: %w", c.name(), n, err)
		}
		arms = append(arms, a)
		run.names = append(run.names, n)
	}
	if len(arms) == 0 {
		return run, nil
	}
	probe := scenario.StartNoise(time.Millisecond)
	ld := startLoad(arms, clock)
	stopPoll := pollEjected(arms)
	time.Sleep(tm.warm)
	run.noise[phaseWarm] = probe.Take()
	for _, a := range arms {
		if a.name == armControl {
			continue
		}
		for i, b := range a.fleet.bs {
			if c.all || i == 0 {
				b.set(c.fault)
			}
		}
	}
	ld.phase.Store(phaseBad)
	run.bad = ld.since()
	time.Sleep(tm.bad)
	for _, a := range arms {
		for _, b := range a.fleet.bs {
			b.set(modeOK)
		}
	}
	run.heal = ld.since()
	ld.phase.Store(phaseHealed)
	run.noise[phaseBad] = probe.Take()
	time.Sleep(tm.healed)
	run.end = ld.since()
	run.calls, run.errs = ld.end()
	run.noise[phaseHealed] = probe.Stop()
	run.polled = stopPoll()
	for _, a := range arms {
		var byBackend [][]time.Duration
		for _, b := range a.fleet.bs {
			byBackend = append(byBackend, b.received())
		}
		run.arrivals = append(run.arrivals, byBackend)
		run.addr0 = append(run.addr0, a.fleet.bs[0].addr)
		var opens []time.Duration
		for _, t := range a.opens.times() {
			opens = append(opens, t.Sub(clock))
		}
		run.opens = append(run.opens, opens)
		var chs []change
		most := 0
		if a.changes != nil {
			chs, most = a.changes.snapshot()
		}
		run.changes = append(run.changes, chs)
		run.most = append(run.most, most)
	}
	return run, nil
}

// pollEjected reads every arm's Statuses every 10 ms and keeps the most
// endpoints ejected at once; stop ends it and returns them, by arm (-1
// for an arm without Statuses).
func pollEjected(arms []*arm) func() []int {
	most := make([]int, len(arms))
	for i, a := range arms {
		if a.statuses == nil {
			most[i] = -1
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	go func() {
		defer close(done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			for i, a := range arms {
				if a.statuses == nil {
					continue
				}
				n := 0
				for _, s := range a.statuses() {
					if s.Ejected {
						n++
					}
				}
				mu.Lock()
				most[i] = max(most[i], n)
				mu.Unlock()
			}
		}
	}()
	return func() []int {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(most)
	}
}
