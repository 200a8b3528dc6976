package faults

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
)

// fault is one fault of the matrix: inject starts it on every arm's
// target at the same instant and returns what removes it.
type fault struct {
	name   string
	protos []string // the protocols it runs on: grpc, http, nginx
	about  string   // what it does, for the report
	path   string   // the HTTP path the arms get: /small unless the fault needs /large
	// servers: "" in process, remote in a process of their own (to pause),
	// ten: ten backends per arm behind one host name (HTTP).
	servers string
	// protect: protection matters here: the server must receive no more
	// calls from standard than from plain, and standard's first success
	// must come within recoveryBound of the heal. failFast: standard's
	// failed calls must fail fast (median under failFastBound).
	protect, failFast bool
	// outage: the fault lasts timing.outage, not timing.fault.
	outage bool
	inject func(e *faultEnv) (heal func() error, err error)
}

// faultEnv is what a fault acts on, and what it tells back.
type faultEnv struct {
	proxies []*toxiproxy.Proxy // every arm's proxies
	healthy time.Duration      // the plain arm's median call in the warm-up
	remote  *remoteServers     // servers: remote
	bad     []*httpServer      // servers: ten: each arm's first backend
	note    string             // the numbers the fault chose (a shift's latency)
	spread  time.Duration      // how long starting it took across the arms
}

// The invariant's protection bounds.
const (
	recoveryBound = time.Second
	failFastBound = deadline / 10
)

var (
	allProtos  = []string{"grpc", "http", "nginx"}
	goProtos   = []string{"grpc", "http"}
	httpProtos = []string{"http", "nginx"}
)

var faultList = []fault{
	{name: "latency-100ms", protos: allProtos, about: "toxiproxy latency 100 ms ± 50 ms on the answers", inject: toxic("latency", fixed(map[string]any{"latency": 100, "jitter": 50}))},
	{name: "shift-x2", protos: goProtos, about: "the answers' latency shifted up to ×2 of the healthy median measured in the warm-up (toxiproxy latency, at least 1 ms, at most a third of the deadline), and back down", inject: shift(2)},
	{name: "shift-x10", protos: goProtos, about: "the same shift, ×10", inject: shift(10)},
	{name: "shift-x100", protos: goProtos, about: "the same shift, ×100", inject: shift(100)},
	{name: "jitter", protos: goProtos, about: "toxiproxy latency 20 ms ± 20 ms on the answers", inject: toxic("latency", fixed(map[string]any{"latency": 20, "jitter": 20}))},
	{name: "bandwidth", protos: httpProtos, path: "/large", about: "toxiproxy bandwidth 32 KB/s per connection on the answers, 8 KiB bodies", inject: toxic("bandwidth", fixed(map[string]any{"rate": 32}))},
	{name: "slicer", protos: httpProtos, about: "toxiproxy slicer on the answers: slices of 64 ± 32 bytes, 10 ms apart", inject: toxic("slicer", fixed(map[string]any{"average_size": 64, "size_variation": 32, "delay": 10_000}))},
	{name: "reset-bursts", protos: allProtos, about: "toxiproxy reset_peer (timeout 0) on the answers, in bursts: 250 ms on, 750 ms off", inject: resetBursts},
	{name: "limit-data", protos: goProtos, about: "toxiproxy limit_data 10,000 bytes on the answers: each connection is closed after 10 kB", inject: toxic("limit_data", fixed(map[string]any{"bytes": 10_000}))},
	{name: "slow-close", protos: goProtos, about: "toxiproxy slow_close 1 s on the answers", inject: toxic("slow_close", fixed(map[string]any{"delay": 1000}))},
	{name: "blackhole", protos: allProtos, protect: true, about: "toxiproxy timeout 0 on the answers: requests reach the server, answers never come back; removed, it closes the connections", inject: toxic("timeout", fixed(map[string]any{"timeout": 0}))},
	{name: "dial-hang", protos: goProtos, protect: true, failFast: true, outage: true, about: "the proxies stopped (their connections closed) and, on their addresses, a listener that never accepts, its accept queue full: a connect hangs; then the proxies start again", inject: dialHang},
	{name: "outage", protos: allProtos, protect: true, failFast: true, outage: true, about: "the proxies stopped: connections closed, connects refused; then started again", inject: outage},
	{name: "paused", protos: goProtos, servers: "remote", protect: true, outage: true, about: "the servers' process (this test binary, started again) paused with SIGSTOP, then resumed with SIGCONT", inject: paused},
	{name: "cpu-load", protos: goProtos, about: "no fault on the wire: the client's host loaded by one CPU burner process per CPU", inject: cpuLoad},
	{name: "one-bad-of-ten", protos: []string{"http"}, servers: "ten", about: "ten backends behind one host name (a DialContext spreading connections over ten proxies, each before its own server); one of them answers 503 at once", inject: oneBad},
}

// toxic is a fault made of one toxic on the answers (toxiproxy's
// downstream), on every proxy at once; attrs chooses its attributes.
func toxic(typ string, attrs func(e *faultEnv) map[string]any) func(e *faultEnv) (func() error, error) {
	return func(e *faultEnv) (func() error, error) {
		spread, err := atOnce(e.proxies, addToxic(typ, "downstream", attrs(e)))
		e.spread = spread
		heal := func() error {
			_, err := atOnce(e.proxies, func(p *toxiproxy.Proxy) error {
				if err := removeToxic(p); err != nil && !errors.Is(err, toxiproxy.ErrToxicNotFound) {
					return err
				}
				return nil
			})
			return err
		}
		return heal, err
	}
}

func fixed(attrs map[string]any) func(*faultEnv) map[string]any {
	return func(*faultEnv) map[string]any { return attrs }
}

// shift is a latency toxic that makes the answers k times as slow as the
// healthy median: k−1 times it added, in whole milliseconds (toxiproxy's
// unit), at least 1 ms, at most a third of the deadline.
func shift(k int) func(e *faultEnv) (func() error, error) {
	return toxic("latency", func(e *faultEnv) map[string]any {
		add := max(time.Duration(k-1)*e.healthy, time.Millisecond).Round(time.Millisecond)
		capped := ""
		if add > deadline/3 {
			add, capped = (deadline / 3).Truncate(time.Millisecond), " (capped at a third of the deadline)"
		}
		e.note = fmt.Sprintf("+%d ms: ×%d of the healthy median %v%s", add.Milliseconds(), k, e.healthy.Round(10*time.Microsecond), capped)
		return map[string]any{"latency": add.Milliseconds()}
	})
}

// resetBursts adds reset_peer on every proxy for 250 ms of every second,
// until healed.
func resetBursts(e *faultEnv) (func() error, error) {
	add := addToxic("reset_peer", "downstream", map[string]any{"timeout": 0})
	remove := func(p *toxiproxy.Proxy) error { return removeToxic(p) }
	spread, err := atOnce(e.proxies, add)
	e.spread = spread
	if err != nil {
		return func() error { _, err := atOnce(e.proxies, remove); return err }, err
	}
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		var errs []error
		on := true
		for {
			wait := 750 * time.Millisecond
			if on {
				wait = 250 * time.Millisecond
			}
			select {
			case <-stop:
				if on {
					_, err := atOnce(e.proxies, remove)
					errs = append(errs, err)
				}
				done <- errors.Join(errs...)
				return
			case <-time.After(wait):
			}
			f := add
			if on {
				f = remove
			}
			_, err := atOnce(e.proxies, f)
			errs = append(errs, err)
			on = !on
		}
	}()
	return func() error { close(stop); return <-done }, nil
}

// outage stops every proxy (connections closed, connects refused) and
// starts them again on the same addresses to heal.
func outage(e *faultEnv) (func() error, error) {
	spread, err := atOnce(e.proxies, stopProxy)
	e.spread = spread
	heal := func() error { _, err := atOnce(e.proxies, startProxy); return err }
	return heal, err
}

// dialHang stops every proxy and puts a listener that hangs
// (hangListener) on its address; to heal, the listeners close and the
// proxies start again.
func dialHang(e *faultEnv) (func() error, error) {
	hangs := make([]func(), len(e.proxies))
	idx := map[*toxiproxy.Proxy]int{}
	for i, p := range e.proxies {
		idx[p] = i
	}
	spread, err := atOnce(e.proxies, func(p *toxiproxy.Proxy) error {
		p.Stop()
		h, err := hangListener(p.Listen)
		hangs[idx[p]] = h
		return err
	})
	e.spread = spread
	heal := func() error {
		_, err := atOnce(e.proxies, func(p *toxiproxy.Proxy) error {
			if h := hangs[idx[p]]; h != nil {
				h()
			}
			return p.Start()
		})
		return err
	}
	return heal, err
}

// paused stops the servers' process with SIGSTOP; SIGCONT heals.
func paused(e *faultEnv) (func() error, error) {
	start := time.Now()
	err := syscall.Kill(e.remote.pid, syscall.SIGSTOP)
	e.spread = time.Since(start)
	return func() error { return syscall.Kill(e.remote.pid, syscall.SIGCONT) }, err
}

// cpuLoad starts the CPU burners; stopping them heals.
func cpuLoad(e *faultEnv) (func() error, error) {
	start := time.Now()
	b, err := startBurners()
	e.spread = time.Since(start)
	if err != nil {
		return func() error { return nil }, err
	}
	return func() error { b.stop(); return nil }, nil
}

// oneBad makes each arm's first backend answer 503.
func oneBad(e *faultEnv) (func() error, error) {
	for _, s := range e.bad {
		s.bad.Store(true)
	}
	return func() error {
		for _, s := range e.bad {
			s.bad.Store(false)
		}
		return nil
	}, nil
}
