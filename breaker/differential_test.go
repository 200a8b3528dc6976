package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/sony/gobreaker/v2"
)

var errExcluded = errors.New("excluded")

// script is a random workload: calls start at given instants, run for a
// given time (so they may overlap), and end with an outcome.
type script struct {
	consecutive, probes int
	openTimeout         time.Duration
	calls               []scriptCall
}

type scriptCall struct {
	start, dur time.Duration
	err        error
}

func randomScript(r *rand.Rand) script {
	s := script{
		consecutive: 1 + r.IntN(8),
		probes:      1 + r.IntN(6),
		openTimeout: time.Duration(50+r.IntN(1500)) * time.Millisecond,
	}
	// Failure windows over a 20 s horizon, and a background flake rate.
	type span struct{ from, to time.Duration }
	var down []span
	for range 1 + r.IntN(4) {
		from := time.Duration(r.IntN(15000)) * time.Millisecond
		down = append(down, span{from, from + time.Duration(r.IntN(2000))*time.Millisecond})
	}
	flake := 0.0
	if r.IntN(2) == 0 {
		flake = r.Float64() * 0.15
	}
	spacing := time.Duration(1+r.IntN(100)) * time.Millisecond
	maxDur := time.Duration(r.IntN(300)) * time.Millisecond
	var at time.Duration
	for at < 20*time.Second && len(s.calls) < 500 {
		c := scriptCall{start: at}
		if maxDur > 0 && r.IntN(2) == 0 {
			c.dur = time.Duration(r.Int64N(int64(maxDur)))
			c.dur -= c.dur % time.Millisecond
		}
		isDown := false
		for _, d := range down {
			if at >= d.from && at < d.to {
				isDown = true
			}
		}
		switch {
		case isDown || r.Float64() < flake:
			c.err = errDown
		case r.IntN(20) == 0:
			c.err = errExcluded
		}
		s.calls = append(s.calls, c)
		at += spacing
		if r.IntN(4) == 0 {
			at += time.Duration(r.IntN(int(s.openTimeout/time.Millisecond)+1)) * time.Millisecond
		}
	}
	return s
}

// TestDifferentialGobreaker runs 1,000 random scripts, with overlapping calls,
// on the native engine and on raw gobreaker/v2 side by side, and requires the
// same admissions and the same transitions at the same instants.
func TestDifferentialGobreaker(t *testing.T) {
	scripts := 1000
	if testing.Short() {
		scripts = 100
	}
	r := rand.New(rand.NewPCG(2, 0))
	var total diffStats
	for i := range scripts {
		s := randomScript(r)
		synctest.Test(t, func(t *testing.T) {
			st, err := runDifferential(s)
			if err != nil {
				t.Fatalf("script %d (%d consecutive, %d probes, open %v, %d calls): %v",
					i, s.consecutive, s.probes, s.openTimeout, len(s.calls), err)
			}
			total.transitions += st.transitions
			total.quota += st.quota
			total.closes += st.closes
		})
	}
	t.Logf("%d scripts: %d transitions (%d closes from half-open), %d quota rejections", scripts, total.transitions, total.closes, total.quota)
	// The scripts must exercise every path, or agreement proves little.
	if total.transitions < 5*scripts || total.closes < scripts || total.quota < scripts {
		t.Errorf("scripts too tame: %+v", total)
	}
}

type diffStats struct{ transitions, closes, quota int }

func runDifferential(s script) (diffStats, error) {
	var st diffStats
	start := time.Now()
	var nativeEvents, gobEvents []string
	record := func(to *[]string) func(from, to breaker.State) {
		return func(from, st breaker.State) {
			*to = append(*to, fmt.Sprintf("%v→%v@%v", from, st, time.Since(start)))
		}
	}
	nb, err := breaker.New(breaker.Settings{
		ConsecutiveFailures: s.consecutive,
		HalfOpenProbes:      s.probes,
		OpenTimeout:         s.openTimeout,
		IsExcluded:          func(err error) bool { return err == errExcluded },
		OnStateChange:       record(&nativeEvents),
	})
	if err != nil {
		return st, err
	}
	onGob := record(&gobEvents)
	consecutive := uint32(s.consecutive)
	gb := gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{
		MaxRequests: uint32(s.probes),
		Timeout:     s.openTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= consecutive },
		IsExcluded:  func(err error) bool { return err == errExcluded },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			onGob(mapState(from), mapState(to))
		},
	})

	// Events: each call's start and, if admitted, its end. At the same
	// instant, ends go before starts, then by call index.
	type ev struct {
		at    time.Duration
		end   bool
		index int
	}
	evs := make([]ev, 0, 2*len(s.calls))
	for i, c := range s.calls {
		evs = append(evs, ev{c.start, false, i})
		if c.dur > 0 { // an instant call ends right after it starts
			evs = append(evs, ev{c.start + c.dur, true, i})
		}
	}
	sort.SliceStable(evs, func(a, b int) bool {
		if evs[a].at != evs[b].at {
			return evs[a].at < evs[b].at
		}
		if evs[a].end != evs[b].end {
			return evs[a].end
		}
		return evs[a].index < evs[b].index
	})
	permits := make([]breaker.Permit, len(s.calls))
	dones := make([]func(error), len(s.calls))
	for _, e := range evs {
		if d := e.at - time.Since(start); d > 0 {
			time.Sleep(d)
		}
		c := s.calls[e.index]
		if e.end {
			if dones[e.index] != nil {
				permits[e.index].Done(c.err)
				dones[e.index](c.err)
			}
			continue
		}
		p, nerr := nb.Allow(context.Background())
		done, gerr := gb.Allow()
		if (nerr == nil) != (gerr == nil) ||
			errors.Is(nerr, breaker.ErrTooManyProbes) != errors.Is(gerr, gobreaker.ErrTooManyRequests) {
			return st, fmt.Errorf("call %d at %v: native %v, gobreaker %v\nnative:    %v\ngobreaker: %v",
				e.index, e.at, nerr, gerr, nativeEvents, gobEvents)
		}
		if errors.Is(nerr, breaker.ErrTooManyProbes) {
			st.quota++
		}
		permits[e.index], dones[e.index] = p, done
		if c.dur == 0 && done != nil {
			p.Done(c.err)
			done(c.err)
		}
	}
	if !slices.Equal(nativeEvents, gobEvents) {
		return st, fmt.Errorf("transitions differ\nnative:    %v\ngobreaker: %v", nativeEvents, gobEvents)
	}
	if nb.State() != mapState(gb.State()) {
		return st, fmt.Errorf("final state: native %v, gobreaker %v", nb.State(), gb.State())
	}
	st.transitions = len(nativeEvents)
	for _, e := range nativeEvents {
		if strings.HasPrefix(e, "half-open→closed") {
			st.closes++
		}
	}
	return st, nil
}

func mapState(s gobreaker.State) breaker.State {
	switch s {
	case gobreaker.StateOpen:
		return breaker.StateOpen
	case gobreaker.StateHalfOpen:
		return breaker.StateHalfOpen
	}
	return breaker.StateClosed
}
