package scenario

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/endpoint"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/preset"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Backend faults of OneBad.
const (
	BackendFails = "fails" // every call fails (gRPC Unavailable)
	BackendHangs = "hangs" // every call hangs until its caller gives up
	BackendSlow  = "slow"  // every call takes ten times the healthy time
)

// OneBadArm is a client of OneBad: the recommended chain (grpcmw.Standard)
// with or without the per-endpoint policy, its calls declared idempotent
// or not.
type OneBadArm struct {
	Endpoints, Idempotent bool
}

func (a OneBadArm) String() string {
	s := "Standard"
	if a.Endpoints {
		s += " + Endpoints"
	}
	if a.Idempotent {
		return s + ", idempotent"
	}
	return s + ", not idempotent"
}

// OneBadResult is what an arm of OneBad measured.
type OneBadResult struct {
	Arm            OneBadArm
	Calls, OK      int           // calls made, and answered well, over the whole run
	Refused        int           // calls a breaker refused (breaker.ErrOpen)
	P99            time.Duration // of the calls made while the backend was bad
	HealthyP99     time.Duration // of the calls made before
	Bad            int64         // calls the bad backend received after the first second of its fault
	Fair           float64       // its fair share of them: the calls all backends received then ÷ backends
	Eject, Readmit time.Duration // from the fault's start to its ejection, from the heal to its readmission (-1: not seen)
}

// Backends is how many backends OneBad runs; HealthyTime is each one's
// service time.
const (
	Backends    = 10
	HealthyTime = 2 * time.Millisecond
)

// OneBad runs arm over Backends real gRPC servers on loopback behind one
// name (a resolver of its own): callers callers with 1 s deadlines for
// warm, then backend #0 is bad (fault) for bad, then healed for healed.
func OneBad(arm OneBadArm, fault string, callers int, warm, bad, healed time.Duration) (OneBadResult, error) {
	res := OneBadResult{Arm: arm, Eject: -1, Readmit: -1}
	var faulty atomic.Bool
	var srvs []*testserver.GRPC
	defer func() {
		for _, s := range srvs {
			s.Stop()
		}
	}()
	var eps []resolver.Endpoint
	for i := range Backends {
		s, err := testserver.NewGRPC(func(int64, string) testserver.GRPCAnswer {
			if i == 0 && faulty.Load() {
				switch fault {
				case BackendFails:
					return testserver.GRPCAnswer{Code: codes.Unavailable}
				case BackendHangs:
					return testserver.GRPCAnswer{Hang: true}
				case BackendSlow:
					return testserver.GRPCAnswer{Delay: 10 * HealthyTime}
				}
			}
			return testserver.GRPCAnswer{Delay: HealthyTime}
		})
		if err != nil {
			return res, err
		}
		srvs = append(srvs, s)
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: s.Addr}}})
	}
	switch fault {
	case BackendFails, BackendHangs, BackendSlow:
	default:
		return res, fmt.Errorf("scenario: OneBad: fault %q: want %s, %s or %s", fault, BackendFails, BackendHangs, BackendSlow)
	}
	r := manual.NewBuilderWithScheme("onebad")
	r.InitialState(resolver.State{Endpoints: eps})

	var mu sync.Mutex
	var faultAt, healAt time.Time
	var opts []grpcmw.Option
	if arm.Idempotent {
		opts = append(opts, grpcmw.AllIdempotent())
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`)}
	if arm.Endpoints {
		h, err := grpcmw.NewEndpointHealth(endpoint.Settings{OnChange: func(c endpoint.Change) {
			if c.Endpoint != srvs[0].Addr || c.Capped {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case c.Ejected && !faultAt.IsZero() && healAt.IsZero() && res.Eject < 0:
				res.Eject = time.Since(faultAt)
			case !c.Ejected && !healAt.IsZero() && res.Readmit < 0:
				res.Readmit = time.Since(healAt)
			}
		}})
		if err != nil {
			return res, err
		}
		opts = append(opts, grpcmw.Endpoints(h))
		dial = dial[:2] // the policy's service config
	}
	ic, err := grpcmw.Standard(preset.Settings{}, opts...)
	if err != nil {
		return res, err
	}
	conn, err := grpc.NewClient(r.Scheme()+":///backends", append(dial, ic.DialOptions()...)...)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	// phase: 0 warm, 1 bad, 2 healed; latencies per phase.
	var phase atomic.Int32
	lat := [3][]time.Duration{}
	var calls, ok, refused [3]int
	end := time.Now().Add(warm + bad + healed)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for time.Now().Before(end) {
				p := phase.Load()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				start := time.Now()
				_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
				took := time.Since(start)
				cancel()
				mu.Lock()
				calls[p]++
				lat[p] = append(lat[p], took)
				switch {
				case err == nil:
					ok[p]++
				case errors.Is(err, breaker.ErrOpen):
					refused[p]++
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(warm)
	mu.Lock()
	faultAt = time.Now()
	mu.Unlock()
	faulty.Store(true)
	phase.Store(1)
	time.Sleep(min(time.Second, bad))
	received := func() (bad, all int64) {
		for i, s := range srvs {
			n := s.Received.Load()
			all += n
			if i == 0 {
				bad = n
			}
		}
		return bad, all
	}
	bad0, all0 := received()
	time.Sleep(bad - min(time.Second, bad))
	bad1, all1 := received()
	mu.Lock()
	healAt = time.Now()
	mu.Unlock()
	faulty.Store(false)
	phase.Store(2)
	wg.Wait()

	for p := range 3 {
		res.Calls += calls[p]
		res.OK += ok[p]
		res.Refused += refused[p]
	}
	res.Bad, res.Fair = bad1-bad0, float64(all1-all0)/Backends
	res.HealthyP99, res.P99 = p99(lat[0]), p99(lat[1])
	return res, nil
}

func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return quantileOf(d, 0.99)
}
