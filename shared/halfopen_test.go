package shared_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/shared"
)

// thinRecovery is a recovery on thin traffic: each of 5 instances calls
// the downstream twice a second; it fails for 3 s, then heals.
type thinRecovery struct {
	recovered time.Duration // from the heal until every instance is closed (0: not within 8 s)
	probes    uint64        // over the fleet, after the heal
	failed    int64         // downstream calls that failed
}

func runThin(t *testing.T, srv fleetRedis, share bool) thinRecovery {
	const instances = 5
	s := breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: time.Second, HalfOpenProbes: 3, HalfOpenSuccesses: 3}
	bs := make([]*breaker.Breaker, instances)
	for i := range bs {
		bs[i] = must(breaker.New(s))
		if share {
			sh := must(shared.Share(bs[i], shared.Options{Client: srv.universal(t), Name: "thin"}))
			defer sh.Close()
		}
	}
	start := time.Now()
	heal := start.Add(3 * time.Second)
	var failed atomic.Int64
	call := func(context.Context) error {
		if time.Now().Before(heal) {
			failed.Add(1)
			return errDown
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range bs {
		wg.Go(func() {
			// Spread over the half second: the instances' calls interleave.
			t := time.NewTimer(time.Duration(i) * 100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				_ = bs[i].Do(ctx, call)
				t.Reset(500 * time.Millisecond)
			}
		})
	}
	time.Sleep(time.Until(heal))
	var probesBefore uint64
	for _, b := range bs {
		probesBefore += b.Counts().Probes
	}
	var r thinRecovery
	for deadline := heal.Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		closed := 0
		for _, b := range bs {
			if b.State() == breaker.StateClosed {
				closed++
			}
		}
		if closed == instances {
			r.recovered = time.Since(heal)
			break
		}
	}
	for _, b := range bs {
		r.probes += b.Counts().Probes
	}
	r.probes -= probesBefore
	r.failed = failed.Load()
	return r
}

// TestThinTrafficRecovery measures what the fleet's one probe round costs
// when every instance sees a key thinly (2 calls a second, 3 probes to
// close): the round's instance takes its probes from its own callers, so
// the fleet closes when that instance has seen HalfOpenProbes calls — as
// long as each local breaker takes for its own round — with one round's
// probes instead of one per instance. A half-open decided on the fleet's
// probes (each instance probing, outcomes summed in Redis) would close
// sooner only by the probes the others' callers would have sent in that
// time, and would need a Redis round trip on the call path (a probe
// permit) or let the fleet send more than HalfOpenProbes: shared breakers
// keep one instance's round (docs/shared.md).
func TestThinTrafficRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("a recovery in real time: not in -short")
	}
	srv := startRedis(t, "")
	local := runThin(t, nil, false)
	sh := runThin(t, srv, true)
	t.Logf("thin traffic: every instance closed %v after the heal shared (%d probes), %v local (%d probes); failed calls %d shared, %d local",
		sh.recovered.Round(time.Millisecond), sh.probes, local.recovered.Round(time.Millisecond), local.probes, sh.failed, local.failed)
	if sh.recovered == 0 || local.recovered == 0 {
		t.Fatalf("not every instance closed within 8 s of the heal (shared %v, local %v)", sh.recovered, local.recovered)
	}
	if sh.probes >= local.probes {
		t.Errorf("shared: %d probes, want fewer than local's %d", sh.probes, local.probes)
	}
	// One stay and one round's probes at one instance's rate past local's.
	if limit := local.recovered + 2500*time.Millisecond; sh.recovered > limit {
		t.Errorf("shared: closed %v after the heal, want within %v (local %v, one stay and one round more)", sh.recovered, limit, local.recovered)
	}
}
