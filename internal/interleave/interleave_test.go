package interleave

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

var (
	flagSeed     = flag.Uint64("interleave.seed", 0, "run only the case of this seed")
	flagBase     = flag.Uint64("interleave.base", 0, "base seed: case n runs seed base<<32 | n")
	flagCases    = flag.Int("interleave.cases", 0, "cases to run (0: the default bound)")
	flagDuration = flag.Duration("interleave.duration", 0, "run cases for this long (with -interleave.cases, whichever ends first)")
	flagReal     = flag.Bool("interleave.loopback", true, "run 1 case in 125 over real loopback sockets (false: in a bubble)")
	flagVerbose  = flag.Bool("interleave.v", false, "log every case")
	flagMode     = flag.String("interleave.mode", "", "run only cases of this mode: Do, http or grpc")
)

// defaultCases is the bound of a plain go test run.
const defaultCases = 3000

// regressions are seeds that found defects; they run on every go test.
var regressions = []struct {
	seed uint64
	what string
}{
	{727, "httpmw: a late hedge throws the winner's response away (no response)"},
	{117, "grpcmw: a late hedge wipes the caller's header and trailer"},
	{159, "grpcmw: a late hedge wipes the caller's header and trailer"},
	{179, "grpcmw: a hedge in a user's own policy wrapping a chain sends a method not declared idempotent twice"},
	{1145, "grpcmw: a hedge in a user's own policy wrapping a chain sends a method not declared idempotent twice"},
	{273, "hedge → AIMD limit → breaker → timeout: attempt timeouts do not lower the limit"},
	{616, "hedge → AIMD limit: attempt timeouts do not lower the limit"},
	{23, "hedge → throttle → timeout: attempt timeouts are not counted as refusals"},
	{81, "hedge → throttle → timeout over gRPC: attempt timeouts count no request"},
	{46, "hedge: a panic in one attempt reaches the caller only when the others end"},
	{128, "hedge: a panic in one attempt reaches the caller only when the others end"},
	{1230, "hedge: a sent hedge that lost the race lowers Stats().Hedges"},
	{1447, "hedge: a sent hedge that lost the race lowers Stats().Hedges"},
	{70, "grpcmw: a user's own policy running two attempts at once sends a method not declared idempotent twice"},
	{16, "httpmw: a success is lost and the fallback's httpmw.Respond is refused"},
	{1249, "httpmw: a success is lost and the fallback's httpmw.Respond is refused"},
	{11, "httpmw: a panic in a user's policy leaves a response body open"},
	{254, "httpmw: a panic in a fallback leaves a response body open"},
	// The harness's own: invariant 5 waited only for the deaf attempts
	// listed before the one that panicked.
	{47244676723, "harness: a panic that waits for a deaf hedge of a nested hedge read as late"},
	{47244661118, "harness: a panic that waits for a deaf attempt under a user's policy run twice read as late"},
	{28452, "harness: a timeout nested in a user's own policy outside a throttle read as the attempt timeout"},
	{9890, "harness, loopback: an HTTP answer a moment before the attempt's deadline the client never saw read as live"},
	{46471, "harness, loopback: an HTTP answer a moment before the attempt's deadline the client never saw read as live"},
	{21474837999, "harness, endpoints: a hedge's branch an open breaker refused, answered by a fallback inside the hedge, wins at the instant another attempt's failure came (the breaker counts that one neutral)"},
	{12884902553, "deferred: own(twice) → breaker → bulkhead → timeout → fallback over HTTP: two attempts both succeed for the breaker (the fallback answers the one the exchange refused) and add their permits to the call's deferred set at once (a data race under -race)"},
	{4387, "deferred: as 12884902553, another chain"},
	{13480, "deferred: as 12884902553, another chain"},
}

// coverage counts what the cases exercised, so that the harness cannot
// pass by checking nothing.
type coverage struct {
	cases, drawRetries                                    int
	modes                                                 [3]int
	real, hedged, nonIdempotent, panicked, cleanSuccesses int
	hedgeCounted, throttleCounted, breakerCounted         int
	limitCounted, probesChecked, telemetryChecked         int
	viaSpec                                               int    // chains built from a spec file
	specRefused                                           string // a spec file refused for more than its lint: the harness's rendering is wrong
	// gRPC through the endpoint policy: cases; cases with an ejection, a
	// capped opening, endpoints readmitted by picks after the stays;
	// attempts checked to go elsewhere
	epCases, epEjected, epCapped, epReadmitted, epElsewhere int
}

var stats coverage

// TestInterleave runs random chains, adapters and timings and checks the
// invariants of doc.go on each.
func TestInterleave(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	if *flagSeed != 0 {
		runSeed(t, *flagSeed)
		return
	}
	t.Run("regressions", func(t *testing.T) {
		for _, rg := range regressions {
			t.Run(fmt.Sprint(rg.seed), func(t *testing.T) {
				t.Log(rg.what)
				runSeed(t, rg.seed)
			})
		}
	})
	n := *flagCases
	if n == 0 && *flagDuration == 0 {
		n = defaultCases
		if testing.Short() {
			n /= 5
		}
	}
	stats = coverage{}
	start := time.Now()
	failed := 0
	for i := 0; n == 0 || i < n; i++ {
		if *flagDuration > 0 && time.Since(start) > *flagDuration {
			break
		}
		seed := *flagBase<<32 | uint64(i+1)
		if !runSeed(t, seed) {
			failed++
		}
	}
	el := time.Since(start)
	s := &stats
	t.Logf("%d cases in %v: %.0f cases/s; %d failed", s.cases, el.Round(time.Millisecond), float64(s.cases)/el.Seconds(), failed)
	t.Logf("coverage: Do %d, http %d, grpc %d (loopback %d); hedged %d, not idempotent %d, panicked %d, clean successes %d; hedge counts checked %d, throttle %d, breaker %d, limit drops %d, probes %d, telemetry %d; chains redrawn %d, built from a spec file %d",
		s.modes[0], s.modes[1], s.modes[2], s.real, s.hedged, s.nonIdempotent, s.panicked, s.cleanSuccesses,
		s.hedgeCounted, s.throttleCounted, s.breakerCounted, s.limitCounted, s.probesChecked, s.telemetryChecked, s.drawRetries, s.viaSpec)
	t.Logf("endpoints: %d cases through the policy; with an ejection %d, a capped opening %d, readmitted by picks after the stays %d; attempts checked to go elsewhere %d",
		s.epCases, s.epEjected, s.epCapped, s.epReadmitted, s.epElsewhere)
	if s.specRefused != "" {
		t.Errorf("a drawn chain written as a spec file was refused for more than its lint: %s", s.specRefused)
	}
	if s.cases >= 200 {
		for _, c := range []struct {
			name     string
			got, min int
		}{
			{"Do cases", s.modes[0], s.cases / 10}, {"http cases", s.modes[1], s.cases / 10}, {"grpc cases", s.modes[2], s.cases / 10},
			{"hedged cases", s.hedged, s.cases / 50}, {"non-idempotent requests", s.nonIdempotent, s.cases / 50},
			{"cases with a panic", s.panicked, s.cases / 100}, {"clean successes", s.cleanSuccesses, s.cases / 5},
			{"hedge counts checked", s.hedgeCounted, s.cases / 100}, {"throttle counts checked", s.throttleCounted, s.cases / 100},
			{"breaker counts checked", s.breakerCounted, s.cases / 50}, {"probes checked", s.probesChecked, s.cases / 20},
			{"telemetry checked", s.telemetryChecked, s.cases / 20}, {"chains from a spec file", s.viaSpec, s.cases / 50},
			{"cases through the endpoint policy", s.epCases, s.cases / 20}, {"cases with an endpoint ejected", s.epEjected, s.cases / 60},
			{"cases with an opening beyond the ejection cap", s.epCapped, s.cases / 300}, {"cases with endpoints readmitted by picks", s.epReadmitted, s.cases / 60},
			{"attempts checked to go to an endpoint their call had not tried", s.epElsewhere, s.cases / 40},
		} {
			if c.got < c.min {
				t.Errorf("coverage: %d %s in %d cases, want at least %d: the invariants were hardly exercised", c.got, c.name, s.cases, c.min)
			}
		}
	}
}

// draw builds the case of seed: a chain (a new draw while chain.New or an
// adapter refuses it) and the downstream's behaviour.
func draw(seed uint64, allowReal bool) *kase {
	for try := 0; ; try++ {
		cs := &kase{seed: seed, rng: rand.New(rand.NewPCG(seed, uint64(try)))}
		r := cs.rng
		cs.mode = mode(r.IntN(3))
		if *flagMode != "" && *flagMode != cs.mode.String() {
			continue
		}
		cs.real = r.IntN(125) == 0 && allowReal
		cs.idempotent = r.IntN(3) > 0
		cs.idemKey = cs.mode == modeHTTP && cs.idempotent && r.IntN(3) == 0
		cs.metrics = cs.mode != modeDo && r.IntN(2) == 0
		cs.watchdog = time.Hour
		if cs.real {
			cs.watchdog = time.Second
			cs.margin = 50 * time.Millisecond
		}
		if err := cs.drawChain(); err != nil {
			stats.drawRetries++
			continue
		}
		cs.drawBehaviour()
		cs.drawEndpoints()
		return cs
	}
}

// runSeed runs the case of seed and reports whether it held.
func runSeed(t *testing.T, seed uint64) bool {
	t.Helper()
	cs := draw(seed, *flagReal)
	var vs []violation
	var leaked string
	run := func() {
		var e *env
		var err error
		switch cs.mode {
		case modeDo:
			e = cs.doEnv()
		case modeHTTP:
			e, err = cs.httpEnv(cs.real)
		case modeGRPC:
			e, err = cs.grpcEnv(cs.real)
		}
		if err != nil {
			vs = append(vs, violation{0, fmt.Sprintf("the adapter refused the chain: %v", err)})
			return
		}
		cs.origin = time.Now()
		cs.runCalls(e)
		c := &checker{cs: cs}
		if cs.real {
			c.slack = 50 * time.Millisecond
			time.Sleep(100 * time.Millisecond)
		} else {
			synctest.Wait()
			time.Sleep(10 * time.Second) // deaf answers and drains end
		}
		c.check(e)
		if !cs.real {
			c.probes()
		}
		if cs.eps != nil {
			c.endpoints(e)
		}
		if e.closeFn != nil {
			e.closeFn()
		}
		vs = append(vs, c.out...)
		if !cs.real {
			synctest.Wait()
			leaked = bubbleLeaks()
		}
	}
	var crashed any
	if cs.real {
		ignore := goleak.IgnoreCurrent()
		func() {
			defer func() {
				if v := recover(); v != nil {
					crashed = fmt.Sprintf("%v\n%s", v, stack())
				}
			}()
			run()
		}()
		if err := goleak.Find(ignore); err != nil {
			leaked = err.Error()
		}
	} else {
		// a subtest of its own: synctest.Test ends its test with FailNow
		// when the race detector reports in the bubble
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			defer func() {
				if v := recover(); v != nil {
					crashed = v
				}
			}()
			synctest.Test(t, func(*testing.T) {
				defer func() {
					if v := recover(); v != nil {
						crashed = fmt.Sprintf("%v\n%s", v, stack())
					}
				}()
				run()
			})
		})
	}
	if crashed != nil {
		vs = append(vs, violation{5, fmt.Sprintf("the case panicked or deadlocked: %v", crashed)})
	}
	if leaked != "" {
		vs = append(vs, violation{5, "goroutines outlived the case:\n" + leaked})
	}
	record(cs)
	if *flagVerbose {
		t.Logf("seed %d: %v", seed, cs)
	}
	if len(vs) == 0 {
		return true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %v\n", seed, cs)
	for _, v := range vs {
		fmt.Fprintf(&b, "\t%v\n", v)
	}
	fmt.Fprintf(&b, "\trerun: go test ./internal/interleave -run 'TestInterleave$' -interleave.seed=%d -v", seed)
	if *flagMode != "" {
		// a seed's case is drawn again until its mode is the one asked for
		fmt.Fprintf(&b, " -interleave.mode=%s", *flagMode)
	}
	if cs.eps != nil {
		// the timings replay; the endpoint each attempt goes to is
		// round_robin's, which starts at a random one
		b.WriteString(" (through the endpoint policy, whose round robin starts at random: -count=20 if it passes at once)")
	}
	t.Error(b.String())
	return false
}

// record adds a case to the coverage counts.
func record(cs *kase) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	s := &stats
	s.cases++
	s.modes[cs.mode]++
	if cs.fromSpec {
		s.viaSpec++
	}
	if cs.real {
		s.real++
	}
	if cs.eps != nil {
		s.epCases++
	}
	cs.walk(func(p *pol) {
		if p.hg != nil && p.hg.Stats().Hedges > 0 {
			s.hedged++
		}
	})
	if cs.mode != modeDo && !cs.idempotent {
		s.nonIdempotent++
	}
	if len(cs.panics) > 0 {
		s.panicked++
	}
	c := &checker{cs: cs}
	for _, a := range cs.arrivals {
		if a.call >= 0 && cs.results[a.call] != nil && c.cleanOK(a) {
			s.cleanSuccesses++
		}
	}
}

// bubbleLeaks returns the stacks of the goroutines of this bubble other
// than the caller's and the testing package's.
func bubbleLeaks() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		if !strings.Contains(head, "synctest bubble") || strings.Contains(head, "running") ||
			strings.Contains(g, "testing.tRunner") || strings.Contains(g, "testingSynctestTest") || strings.Contains(g, "internal/synctest.Run") {
			continue
		}
		out = append(out, g)
	}
	if len(out) > 3 {
		out = append(out[:3], fmt.Sprintf("… and %d more", len(out)-3))
	}
	return strings.Join(out, "\n\n")
}

func stack() string {
	buf := make([]byte, 8<<10)
	return string(buf[:runtime.Stack(buf, false)])
}
