package faults

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/callguard/callguard/internal/scenario"
)

// cell is one fault on one protocol.
type cell struct {
	proto string
	fault fault
}

func (c cell) name() string { return c.proto + "/" + c.fault.name }

// setup is a cell's arms, each with its own servers and proxies.
type setup struct {
	phase    atomic.Int32 // the cell's phase, which every attempt carries
	arms     []*arm
	proxies  []*toxiproxy.Proxy
	received func() ([][phases]int64, error) // by arm
	env      faultEnv
	cleanups []func()
}

func (s *setup) close() {
	for _, a := range s.arms {
		a.close()
	}
	for _, p := range s.proxies {
		p.Stop()
	}
	for _, f := range slices.Backward(s.cleanups) {
		f()
	}
}

// newSetup starts c's servers, a proxy in front of each and an arm on
// each proxy.
func newSetup(lb *lab, c cell) (_ *setup, err error) {
	s := &setup{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	names := armsOf(c.proto)
	path := c.fault.path
	if path == "" {
		path = "/small"
	}
	var upstreams [][]string // by arm
	switch {
	case c.fault.servers == "remote":
		r, err := startRemote(c.proto, len(names))
		if err != nil {
			return nil, err
		}
		s.cleanups = append(s.cleanups, func() {
			_ = syscall.Kill(r.pid, syscall.SIGCONT) // if a failure left it paused
			_ = r.stop()
		})
		s.env.remote, s.received = r, r.counts
		for _, a := range r.addrs {
			upstreams = append(upstreams, []string{a})
		}
	case c.proto == "nginx":
		n, err := startNginx(len(names))
		if err != nil {
			return nil, err
		}
		s.cleanups = append(s.cleanups, n.stop)
		s.received = n.counts
		for _, a := range n.addrs {
			upstreams = append(upstreams, []string{a})
		}
	default:
		backends := 1
		if c.fault.servers == "ten" {
			backends = 10
		}
		var all [][]*counts
		for range names {
			var ups []string
			var mine []*counts
			for i := range backends {
				if c.proto == "grpc" {
					g, err := startGRPC()
					if err != nil {
						return nil, err
					}
					s.cleanups = append(s.cleanups, g.stop)
					ups, mine = append(ups, g.addr), append(mine, &g.counts)
					continue
				}
				h, err := startHTTP()
				if err != nil {
					return nil, err
				}
				s.cleanups = append(s.cleanups, h.stop)
				ups, mine = append(ups, h.addr), append(mine, &h.counts)
				if i == 0 {
					s.env.bad = append(s.env.bad, h)
				}
			}
			upstreams, all = append(upstreams, ups), append(all, mine)
		}
		s.received = func() ([][phases]int64, error) {
			out := make([][phases]int64, len(all))
			for i, cs := range all {
				for _, c := range cs {
					for p, n := range c.snapshot() {
						out[i][p] += n
					}
				}
			}
			return out, nil
		}
	}
	for i, name := range names {
		var addrs []string
		for _, up := range upstreams[i] {
			p, err := lb.proxy(up)
			if err != nil {
				return nil, err
			}
			s.proxies = append(s.proxies, p)
			if err := addToxic("latency", "downstream", map[string]any{"latency": baseLatency.Milliseconds()}, baseToxic)(p); err != nil {
				return nil, err
			}
			addrs = append(addrs, p.Listen)
		}
		var a *arm
		switch {
		case c.proto == "grpc":
			a, err = newGRPCArm(name, addrs[0], &s.phase)
		case len(addrs) > 1:
			a, err = newHTTPArm(name, "http://backends.fleet"+path, roundRobin(addrs), &s.phase)
		default:
			a, err = newHTTPArm(name, "http://"+addrs[0]+path, nil, &s.phase)
		}
		if err != nil {
			return nil, err
		}
		s.arms = append(s.arms, a)
	}
	s.env.proxies = s.proxies
	return s, nil
}

// cellRun is what one run of a cell measured.
type cellRun struct {
	calls    [][]call      // by arm
	heal     time.Duration // since the load's start: the fault removed
	fault    time.Duration // since the load's start: the fault started
	end      time.Duration // since the load's start: the last call started before it
	noise    [phases]scenario.Noise
	received [][phases]int64
	opens    [][]time.Duration // by arm, since the load's start
	env      faultEnv
	healthy  time.Duration
}

// runCell runs c: its arms' load, healthy for tm.warm, under the fault,
// then without it for tm.recovery.
func runCell(lb *lab, c cell, tm timing) (*cellRun, error) {
	s, err := newSetup(lb, c)
	if err != nil {
		return nil, err
	}
	defer s.close()
	window := tm.fault
	if c.fault.outage {
		window = tm.outage
	}
	probe := scenario.StartNoise(time.Millisecond)
	ld := startLoad(s.arms, &s.phase)
	run := &cellRun{}
	time.Sleep(tm.warm)
	run.noise[phaseWarm] = probe.Take()
	s.env.healthy = ld.healthy()
	// The fault phase starts once the fault is in place on every arm, and
	// ends once it is removed from every arm.
	heal, ierr := c.fault.inject(&s.env)
	ld.phase.Store(phaseFault)
	run.fault = ld.since()
	if ierr == nil {
		time.Sleep(window)
	}
	herr := heal()
	run.heal = ld.since()
	ld.phase.Store(phaseRecovery)
	run.noise[phaseFault] = probe.Take()
	if ierr == nil && herr == nil {
		time.Sleep(tm.recovery)
	}
	run.end = ld.since()
	run.calls = ld.end()
	run.noise[phaseRecovery] = probe.Stop()
	if err := errors.Join(ierr, herr); err != nil {
		return nil, fmt.Errorf("faults: %s: %w", c.name(), err)
	}
	if run.received, err = s.received(); err != nil {
		return nil, fmt.Errorf("faults: %s: the servers' counts: %w", c.name(), err)
	}
	for _, a := range s.arms {
		var at []time.Duration
		for _, t := range a.opens.times() {
			at = append(at, t.Sub(ld.t0))
		}
		run.opens = append(run.opens, at)
	}
	run.env, run.healthy = s.env, s.env.healthy
	return run, nil
}
