package endpoint_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/endpoint"
	"github.com/callguard/callguard/internal/attempt"
)

func newSet(t *testing.T, n int, s endpoint.Settings) *endpoint.Set {
	t.Helper()
	set, err := endpoint.NewSet("svc", s)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for i := range n {
		addrs = append(addrs, fmt.Sprintf("10.0.0.%d:80", i))
	}
	set.Update(addrs)
	return set
}

// rr picks from set in round-robin order, as a balancer's child would.
type rr struct {
	set  *endpoint.Set
	turn int
}

func (r *rr) pick(ctx context.Context) (int, endpoint.Pass) {
	eps := r.set.Endpoints()
	i, p, _ := endpoint.Pick(ctx, r.set, len(eps), func() (int, *endpoint.Endpoint, error) {
		i := r.turn % len(eps)
		r.turn++
		return i, eps[i], nil
	})
	return i, p
}

// serve makes n calls, endpoint i answering after took(i) with outcome
// out(i), and returns the calls each endpoint got.
func serve(r *rr, n int, took func(i int) time.Duration, out func(i int) endpoint.Outcome) []int {
	got := make([]int, len(r.set.Endpoints()))
	for range n {
		i, p := r.pick(context.Background())
		got[i]++
		time.Sleep(took(i))
		p.Done(out(i))
	}
	return got
}

func ms(d int) func(int) time.Duration {
	return func(int) time.Duration { return time.Duration(d) * time.Millisecond }
}

func badIs(bad int, o endpoint.Outcome) func(int) endpoint.Outcome {
	return func(i int) endpoint.Outcome {
		if i == bad {
			return o
		}
		return endpoint.Answered
	}
}

func TestEjectProbeReadmit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &rr{set: newSet(t, 10, endpoint.Settings{})}
		got := serve(r, 100, ms(1), badIs(0, endpoint.Failed))
		ep := r.set.Endpoints()[0]
		if !ep.Ejected() || got[0] != endpoint.DefaultConsecutiveFailures {
			t.Fatalf("after 100 calls the failing endpoint got %d and is ejected %v; want %d and ejected", got[0], ep.Ejected(), endpoint.DefaultConsecutiveFailures)
		}
		// Failing on: a round of probes every open stay, the stay doubling
		// to its ceiling.
		got = serve(r, 3000, ms(1), badIs(0, endpoint.Failed)) // 3 s
		if got[0] < 2 || got[0] > 2*4 {
			t.Errorf("over 3 s ejected, the failing endpoint got %d probes; want 2 a round, a round each 0.5 s then 1 s", got[0])
		}
		// Healed: readmitted at its next round of probes, within the
		// ceiling of its stay.
		healed := time.Now()
		for ep.Ejected() && time.Since(healed) < 2*endpoint.DefaultMaxOpenTimeout {
			serve(r, 10, ms(1), badIs(-1, endpoint.Failed))
		}
		if ep.Ejected() || time.Since(healed) > endpoint.DefaultMaxOpenTimeout+50*time.Millisecond {
			t.Errorf("readmitted %v, %v after the heal; want within the longest stay, %v", !ep.Ejected(), time.Since(healed), endpoint.DefaultMaxOpenTimeout)
		}
		if st := ep.Status(); st.Ejections != 1 || st.Readmissions != 1 {
			t.Errorf("status %+v, want 1 ejection and 1 readmission", st)
		}
	})
}

func TestCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var now, most, capped int
		r := &rr{set: newSet(t, 10, endpoint.Settings{OnChange: func(c endpoint.Change) {
			switch {
			case c.Capped:
				capped++
			case c.Ejected:
				now++
				most = max(most, now)
			default:
				now--
			}
		}})}
		got := serve(r, 3000, ms(1), func(int) endpoint.Outcome { return endpoint.Failed })
		if most != 1 || capped == 0 {
			t.Errorf("at most %d ejected at once, %d openings capped; want 1 (10 %% of 10) and some capped", most, capped)
		}
		low := 0
		for _, n := range got {
			if n < 200 {
				low++
			}
		}
		if low > 1 {
			t.Errorf("calls per endpoint %v: more than one endpoint was left out", got)
		}
		// Removing the ejected endpoint frees its place.
		var ejected string
		var keep []string
		for _, ep := range r.set.Endpoints() {
			if ep.Ejected() {
				ejected = ep.Addr()
			} else {
				keep = append(keep, ep.Addr())
			}
		}
		r.set.Update(keep)
		serve(r, 100, ms(1), func(int) endpoint.Outcome { return endpoint.Failed })
		n := 0
		for _, ep := range r.set.Endpoints() {
			if ep.Ejected() {
				n++
			}
		}
		if ejected == "" || n != 1 {
			t.Errorf("after removing the ejected endpoint (%q), %d of 9 ejected; want 1", ejected, n)
		}
	})
}

func TestCapNoneOfOneAllOfHundred(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &rr{set: newSet(t, 1, endpoint.Settings{})}
		serve(r, 50, ms(1), badIs(0, endpoint.Failed))
		if r.set.Endpoints()[0].Ejected() {
			t.Error("the only endpoint was ejected")
		}
		r = &rr{set: newSet(t, 4, endpoint.Settings{MaxEjectionPercent: 100})}
		serve(r, 100, ms(1), func(int) endpoint.Outcome { return endpoint.Failed })
		n := 0
		for _, ep := range r.set.Endpoints() {
			if ep.Ejected() {
				n++
			}
		}
		if n != 4 {
			t.Errorf("%d of 4 ejected with MaxEjectionPercent 100", n)
		}
		// Every one ejected: a pick still goes to one, without a pass.
		i, p := r.pick(context.Background())
		if p.Endpoint() != nil || i < 0 {
			t.Errorf("pick with all ejected: %d, pass for %v; want a candidate without a pass", i, p.Endpoint())
		}
	})
}

func TestSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		took := func(i int) time.Duration {
			if i == 0 {
				return 50 * time.Millisecond
			}
			return time.Millisecond
		}
		r := &rr{set: newSet(t, 5, endpoint.Settings{})}
		serve(r, 200, took, badIs(-1, endpoint.Failed))
		if th := r.set.SlowThreshold(); th != endpoint.DefaultSlowMargin+time.Millisecond {
			t.Errorf("slow threshold %v, want the typical 1 ms + %v", th, endpoint.DefaultSlowMargin)
		}
		if !r.set.Endpoints()[0].Ejected() {
			t.Error("the endpoint answering in 50 ms (others 1 ms) is not ejected")
		}
		// Off: the slow endpoint stays.
		r = &rr{set: newSet(t, 5, endpoint.Settings{SlowFactor: -1})}
		serve(r, 200, took, badIs(-1, endpoint.Failed))
		if r.set.Endpoints()[0].Ejected() {
			t.Error("SlowFactor -1: the slow endpoint was ejected")
		}
	})
}

func TestEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &rr{set: newSet(t, 4, endpoint.Settings{})}
		serve(r, 100, ms(2), badIs(-1, endpoint.Failed))
		// Calls the caller ended soon (a hedge's loser, a short deadline)
		// say nothing against their endpoint.
		serve(r, 100, ms(1), func(int) endpoint.Outcome { return endpoint.Ended })
		for _, ep := range r.set.Endpoints() {
			if ep.Ejected() {
				t.Fatalf("%s ejected for calls its callers ended early", ep.Addr())
			}
		}
		// Calls a deadline ended after running far past the typical
		// answer: a hang.
		took := func(i int) time.Duration {
			if i == 0 {
				return 300 * time.Millisecond
			}
			return 2 * time.Millisecond
		}
		serve(r, 100, took, badIs(0, endpoint.Ended))
		if !r.set.Endpoints()[0].Ejected() {
			t.Error("the endpoint whose calls hang to their deadline is not ejected")
		}
	})
}

func TestPickAvoidsTried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		set := newSet(t, 3, endpoint.Settings{})
		var c attempt.Call
		ctx := context.WithValue(context.Background(), attempt.Key{}, &c)
		eps := set.Endpoints()
		// A child that always offers the first endpoint first.
		always := func(ctx context.Context) *endpoint.Endpoint {
			k := 0
			_, p, _ := endpoint.Pick(ctx, set, len(eps), func() (int, *endpoint.Endpoint, error) {
				k++
				return k - 1, eps[(k-1)%len(eps)], nil
			})
			p.Done(endpoint.Answered)
			return p.Endpoint()
		}
		var seen []string
		for range 4 {
			seen = append(seen, always(ctx).Addr())
		}
		want := []string{eps[0].Addr(), eps[1].Addr(), eps[2].Addr(), eps[0].Addr()}
		if fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Errorf("attempts of one call went to %v, want %v (untried first, then the first tried)", seen, want)
		}
		if always(context.Background()) != eps[0] {
			t.Error("a pick outside an adapter call skipped the first candidate")
		}
	})
}

func TestSettingsErrors(t *testing.T) {
	for _, tc := range []struct {
		s     endpoint.Settings
		field string
	}{
		{endpoint.Settings{MaxEjectionPercent: 101}, "MaxEjectionPercent"},
		{endpoint.Settings{MaxEjectionPercent: -1}, "MaxEjectionPercent"},
		{endpoint.Settings{SlowFactor: 0.5}, "SlowFactor"},
		{endpoint.Settings{SlowMargin: -time.Second}, "SlowMargin"},
		{endpoint.Settings{Breaker: breaker.Settings{OpenTimeout: -time.Second}}, "Breaker"},
		{endpoint.Settings{Breaker: breaker.Settings{Engine: breaker.EngineGobreaker}}, "Breaker.Engine"},
	} {
		_, err := endpoint.NewSet("svc", tc.s)
		var e *endpoint.Error
		if !errors.As(err, &e) || e.Field != tc.field {
			t.Errorf("%+v: %v, want an *endpoint.Error naming %s", tc.s, err, tc.field)
		}
	}
}

func TestSlowReadmitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := true
		took := func(i int) time.Duration {
			if i == 0 && slow {
				return 50 * time.Millisecond
			}
			return time.Millisecond
		}
		r := &rr{set: newSet(t, 5, endpoint.Settings{})}
		serve(r, 200, took, badIs(-1, endpoint.Failed))
		ep := r.set.Endpoints()[0]
		if !ep.Ejected() {
			t.Fatal("the slow endpoint is not ejected")
		}
		// Slow through rounds of probes, then fast.
		serve(r, 3000, took, badIs(-1, endpoint.Failed))
		slow = false
		healed := time.Now()
		for ep.Ejected() && time.Since(healed) < 3*endpoint.DefaultMaxOpenTimeout {
			serve(r, 10, took, badIs(-1, endpoint.Failed))
		}
		if ep.Ejected() {
			t.Errorf("the endpoint, fast again, is still ejected %v after", time.Since(healed))
		}
	})
}

// TestStuckPassedBy: calls in an open loop, one every 500 µs; endpoint #0
// starts to hang (nothing it is sent ends for 300 ms). Picks pass it by
// once its calls in flight have ended none for the slow threshold, before
// the first of them has failed: a handful of calls reach it, not a
// quarter of those made while they hang.
func TestStuckPassedBy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &rr{set: newSet(t, 4, endpoint.Settings{})}
		serve(r, 100, ms(1), badIs(-1, endpoint.Failed))
		var mu sync.Mutex
		var wg sync.WaitGroup
		got := 0
		for range 400 {
			mu.Lock()
			i, p := r.pick(context.Background())
			mu.Unlock()
			if i == 0 {
				got++
			}
			wg.Go(func() {
				if i == 0 {
					time.Sleep(300 * time.Millisecond)
					p.Done(endpoint.Ended)
					return
				}
				time.Sleep(time.Millisecond)
				p.Done(endpoint.Answered)
			})
			time.Sleep(500 * time.Microsecond)
		}
		wg.Wait()
		if th := r.set.SlowThreshold(); got > int(th/(500*time.Microsecond))/4+2 {
			t.Errorf("the hanging endpoint got %d of 400 calls, want those picked within the slow threshold (%v) and no more", got, th)
		}
	})
}

// TestProbesPreferRetriedCalls: an ejected endpoint's probe is a call
// that may be retried (its retry goes elsewhere if the probe fails); a
// call that may not passes the probe by, until such calls have had an
// open stay to come.
func TestProbesPreferRetriedCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &rr{set: newSet(t, 2, endpoint.Settings{})}
		serve(r, 20, ms(1), badIs(0, endpoint.Failed))
		ep := r.set.Endpoints()[0]
		if !ep.Ejected() {
			t.Fatal("not ejected")
		}
		time.Sleep(endpoint.DefaultOpenTimeout) // its stay is over
		pick := func(repeat bool) *endpoint.Endpoint {
			var c attempt.Call
			if _, err := c.Begin(repeat); err != nil {
				t.Fatal(err)
			}
			_, p := r.pick(context.WithValue(context.Background(), attempt.Key{}, &c))
			p.Done(endpoint.Failed)
			return p.Endpoint()
		}
		for i := range 10 {
			if got := pick(false); got == ep {
				t.Fatalf("call %d, not to be retried, was the probe", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got := pick(true); got != ep {
			t.Fatalf("a call that may be retried was not the probe (went to %v)", got)
		}
		// Failed: open again. Only calls that may not be retried now: they
		// probe once one more stay has passed.
		time.Sleep(2 * endpoint.DefaultMaxOpenTimeout)
		probed := false
		for range 200 {
			if pick(false) == ep {
				probed = true
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !probed {
			t.Error("with no call that may be retried, the endpoint was never probed")
		}
	})
}

func TestFindings(t *testing.T) {
	fs, err := endpoint.Findings(endpoint.Settings{})
	if err != nil || len(fs) != 0 {
		t.Errorf("the defaults: %v, %v; want no finding", fs, err)
	}
	var s endpoint.Settings
	s.Breaker.HalfOpenProbes = 50
	fs, err = endpoint.Findings(s)
	var codes []string
	for _, f := range fs {
		codes = append(codes, f.Code)
	}
	if err != nil || fmt.Sprint(codes) != "[CG007 CG011]" {
		t.Errorf("50 probes: %v, %v; want CG007 (all 50 must succeed) and CG011 (too many probes)", codes, err)
	}
}

// TestOneLateAnswer: an endpoint's one answer 100 times its typical time
// (a pause) fails that answer, not the ones after it: the endpoint stays.
func TestOneLateAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &rr{set: newSet(t, 4, endpoint.Settings{})}
		serve(r, 100, ms(1), badIs(-1, endpoint.Failed))
		late := true
		took := func(i int) time.Duration {
			if i == 0 && late {
				late = false
				return 100 * time.Millisecond
			}
			return time.Millisecond
		}
		serve(r, 200, took, badIs(-1, endpoint.Failed))
		if ep := r.set.Endpoints()[0]; ep.Ejected() || ep.Status().Ejections != 0 {
			t.Errorf("one late answer ejected its endpoint: %+v", ep.Status())
		}
	})
}

// TestFailingDisplacesSlow: the cap is full with an endpoint ejected for
// slow answers; another starts failing every call: it takes the slow
// one's place (a slow answer is an answer; a failed call is lost).
func TestFailingDisplacesSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s endpoint.Settings
		s.Breaker.OpenTimeout = time.Minute
		r := &rr{set: newSet(t, 10, s)}
		slow := func(i int) time.Duration {
			if i == 0 {
				return 50 * time.Millisecond
			}
			return time.Millisecond
		}
		serve(r, 300, slow, badIs(-1, endpoint.Failed))
		eps := r.set.Endpoints()
		if !eps[0].Ejected() {
			t.Fatal("the slow endpoint is not ejected")
		}
		got := serve(r, 500, slow, badIs(1, endpoint.Failed))
		if !eps[1].Ejected() || eps[0].Ejected() {
			t.Errorf("slow ejected %v, failing ejected %v; want the failing one in the cap's place", eps[0].Ejected(), eps[1].Ejected())
		}
		if got[1] > 10 {
			t.Errorf("the failing endpoint got %d of 500 calls", got[1])
		}
	})
}
