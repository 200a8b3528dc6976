// Package endpoints measures one bad backend among ten behind one name
// (issue 34): ten real servers per arm on 127.0.0.2 … 127.0.0.11 (one
// port per arm), reached through a resolver of the test's own, one of
// them failing every call, hanging, slow or flapping, then healed; the
// arms side by side, each with its own ten servers: a control whose
// servers stay healthy (the healthy latency under the host's load of the
// moment), a plain client
// (gRPC round_robin; HTTP with keep-alives, a connection to one of the
// addresses in turn), grpc-go's own retry, today's Standard (a breaker
// per method or per host) and Standard with the per-endpoint policy
// (grpcmw.Endpoints, httpmw.NewEndpoints). It reports, per arm, the
// calls' success, their latency, the calls the bad backend received
// against its fair share, the client's refusals, and the time to eject
// and to readmit it, and holds the per-endpoint arms to the goal
// (docs/endpoints.md):
//
//	cd bench && go test ./endpoints/                          # the bounded cases, under a minute
//	cd bench && go test ./endpoints/ -endpoints.full -v       # every case, about two minutes
//	cd bench && go test ./endpoints/ -endpoints.full -endpoints.write-docs
//
// The package is tests only.
package endpoints

import (
	"flag"
	"time"
)

var (
	fullMatrix = flag.Bool("endpoints.full", false, "run every case (both protocols, every fault, every backend failing), not only the bounded ones")
	casesOnly  = flag.String("endpoints.cases", "", "run only the cases whose name (proto/fault) matches this regexp")
	writeDocs  = flag.Bool("endpoints.write-docs", false, "write ../docs/endpoints.md from this run (with -endpoints.full)")
	badFor     = flag.Duration("endpoints.bad", 0, "how long backend #0 stays bad (0: 3s bounded, 12s full, as issue 34 measured)")
	warmFor    = flag.Duration("endpoints.warmup", 0, "healthy traffic before the fault (0: 1.5s bounded, 2s full)")
	healFor    = flag.Duration("endpoints.healed", 0, "traffic after the heal (0: 2.5s bounded, 3s full)")
)

// The numbers every case shares.
const (
	backends    = 10                     // behind one name
	callers     = 20                     // per arm, a closed loop each
	deadline    = time.Second            // per call
	service     = 5 * time.Millisecond   // a healthy backend's service time
	slowBy      = 10                     // a slow backend's service time: ×10
	flapHalf    = 500 * time.Millisecond // a flapping backend: failing, then healthy, each this long
	serviceName = "backends.test"        // the one name
)

// timing is a case's timeline: healthy warm-up, backend #0 (or all ten)
// bad, healed.
type timing struct {
	warm, bad, healed time.Duration
}

func caseTiming() timing {
	t := timing{warm: 1500 * time.Millisecond, bad: 3 * time.Second, healed: 2500 * time.Millisecond}
	if *fullMatrix {
		t = timing{warm: 2 * time.Second, bad: 12 * time.Second, healed: 3 * time.Second}
	}
	if *warmFor > 0 {
		t.warm = *warmFor
	}
	if *badFor > 0 {
		t.bad = *badFor
	}
	if *healFor > 0 {
		t.healed = *healFor
	}
	return t
}
