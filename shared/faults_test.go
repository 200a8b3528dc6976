package shared_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/shared"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// caller calls a breaker every 5 ms until stopped, against a downstream
// that fails while down is set, and keeps the longest call.
type caller struct {
	down    *atomic.Bool
	longest atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startCallers(down *atomic.Bool, bs ...*breaker.Breaker) *caller {
	c := &caller{down: down, stop: make(chan struct{})}
	for _, b := range bs {
		c.wg.Go(func() {
			for {
				select {
				case <-c.stop:
					return
				default:
				}
				start := time.Now()
				_ = b.Do(context.Background(), func(context.Context) error {
					if down.Load() {
						return errDown
					}
					return nil
				})
				if d := int64(time.Since(start)); d > c.longest.Load() {
					c.longest.Store(d)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	return c
}

func (c *caller) halt() { close(c.stop); c.wg.Wait() }

// waitUntil waits up to limit for cond, and reports how long it took
// (ok false if it never held).
func waitUntil(limit time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for deadline := start.Add(limit); ; time.Sleep(2 * time.Millisecond) {
		if cond() {
			return time.Since(start), true
		}
		if time.Now().After(deadline) {
			return time.Since(start), false
		}
	}
}

func all(bs []*breaker.Breaker, st breaker.State) bool {
	for _, b := range bs {
		if b.State() != st {
			return false
		}
	}
	return true
}

// TestRecoveryWithSyncInFlight: every Redis reply takes 60 ms, so that
// most of the time a sync is in flight; the fleet opens on an outage, the
// downstream recovers, the round's probes close the fleet. A sync whose
// request went out before the close must not re-open the prober on the
// outage's counts when its reply comes back: in six recoveries, no
// instance opens again against the healthy downstream.
func TestRecoveryWithSyncInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("about 10 s of real time against redis-server: not in -short")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := startRedis(t, "")
	const instances, recoveries = 3, 6
	settings := breaker.Settings{FailureRate: 0.5, MinCalls: 20, Window: 10 * time.Second, OpenTimeout: 500 * time.Millisecond,
		HalfOpenProbes: 3, HalfOpenSuccesses: 3}
	bs := make([]*breaker.Breaker, instances)
	shs := make([]*shared.Shared, instances)
	for i := range instances {
		h := &faultHook{after: true}
		h.delay.Store(int64(60 * time.Millisecond))
		bs[i] = must(breaker.New(settings))
		shs[i] = must(shared.Share(bs[i], shared.Options{Client: srv.client(t), Name: "orders", Budget: 250 * time.Millisecond, Instrument: instrument(h)}))
	}
	var down atomic.Bool
	calls := startCallers(&down, bs...)
	retrips := 0
	var times []time.Duration
	for r := range recoveries {
		down.Store(true)
		if _, ok := waitUntil(5*time.Second, func() bool { return all(bs, breaker.StateOpen) }); !ok {
			t.Fatalf("recovery %d: the fleet did not open", r)
		}
		down.Store(false)
		recovered := time.Now()
		opens := func() (n uint64) {
			for _, b := range bs {
				n += b.Counts().Opens
			}
			return n
		}
		before := opens()
		if _, ok := waitUntil(5*time.Second, func() bool { return all(bs, breaker.StateClosed) }); !ok {
			t.Fatalf("recovery %d: the fleet did not close", r)
		}
		closed := time.Now()
		time.Sleep(600 * time.Millisecond)
		if n := opens(); n != before {
			retrips++
			t.Logf("recovery %d: %d opens after the downstream recovered", r, n-before)
			if _, ok := waitUntil(5*time.Second, func() bool { return all(bs, breaker.StateClosed) }); !ok {
				t.Fatalf("recovery %d: the fleet did not close again", r)
			}
			closed = time.Now()
		}
		times = append(times, closed.Sub(recovered).Round(time.Millisecond))
	}
	calls.halt()
	for _, sh := range shs {
		sh.Close()
	}
	t.Logf("60 ms a command: %d of %d recoveries re-opened against the healthy downstream; downstream recovered → fleet closed for good: %v", retrips, recoveries, times)
	if retrips != 0 {
		t.Errorf("%d of %d recoveries re-opened the fleet on the outage's counts, want 0", retrips, recoveries)
	}
}

// isNaturalOpen reports whether a command carries a breaker's own open
// ("open <until> <instance>") to the state key and channel.
func isNaturalOpen(args []any) bool {
	if len(args) == 0 {
		return false
	}
	if name, _ := args[0].(string); name != "evalsha" && name != "eval" {
		return false
	}
	for _, a := range args[1:] {
		if s, ok := a.(string); ok && strings.HasPrefix(s, "open ") {
			return true
		}
	}
	return false
}

// TestLostPublishOneProbeRound: the fleet is open on an outage that lasts,
// and a breaker's own opens do not reach Redis: the prober's re-open after
// the first round, or every open (each instance then trips on its own
// reading of the fleet's counts, its open-until its own), the message lost
// on the way or the script call failed. Every round still has one prober
// for the fleet: exactly one instance goes half-open a round.
func TestLostPublishOneProbeRound(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s of real time against redis-server: not in -short")
	}
	for _, tc := range []struct {
		name  string
		every bool  // every open dropped, or the first after a probe round
		err   error // what the dropped command returns (nil: success, as a message lost on the way)
	}{
		{"one-reopen-lost", false, nil},
		{"one-reopen-failed", false, errFailed},
		{"every-open-lost", true, nil},
		{"every-open-failed", true, errFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			srv := startRedis(t, "")
			const instances = 3
			var mu sync.Mutex
			type halfOpen struct {
				at time.Time
				i  int
			}
			var halfOpens []halfOpen
			var armed, dropped atomic.Bool
			bs := make([]*breaker.Breaker, instances)
			shs := make([]*shared.Shared, instances)
			for i := range instances {
				bs[i] = must(breaker.New(fleetSettings(func(_, to breaker.State) {
					if to == breaker.StateHalfOpen {
						mu.Lock()
						halfOpens = append(halfOpens, halfOpen{time.Now(), i})
						mu.Unlock()
						armed.Store(true)
					}
				})))
				drop := &dropHook{err: tc.err, drop: func(args []any) bool {
					if tc.every {
						if isNaturalOpen(args) {
							dropped.Store(true)
							return true
						}
						return false
					}
					return isNaturalOpen(args) && armed.Load() && dropped.CompareAndSwap(false, true)
				}}
				shs[i] = must(shared.Share(bs[i], shared.Options{Client: srv.client(t), Name: "ledger", Instrument: instrument(drop)}))
			}
			var down atomic.Bool
			down.Store(true)
			calls := startCallers(&down, bs...)
			time.Sleep(5 * time.Second)
			calls.halt()
			for _, sh := range shs {
				sh.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			// A round: the half-opens within 300 ms of its first (the stays
			// are a second).
			var rounds [][]int
			var start time.Time
			for _, h := range halfOpens {
				if start.IsZero() || h.at.Sub(start) > 300*time.Millisecond {
					rounds = append(rounds, nil)
					start = h.at
				}
				rounds[len(rounds)-1] = append(rounds[len(rounds)-1], h.i)
			}
			t.Logf("instances half-open, round by round: %v (a re-open dropped: %t)", rounds, dropped.Load())
			if !dropped.Load() || len(rounds) < 3 {
				t.Fatalf("%d rounds, a re-open dropped: %t; want at least 3 rounds after a drop", len(rounds), dropped.Load())
			}
			for r, in := range rounds {
				if len(in) != 1 {
					t.Errorf("round %d: instances %v went half-open, want exactly one", r, in)
				}
			}
		})
	}
}

var errFailed = errors.New("test: the script call did not return in time")

// dropHook drops the commands drop selects: they return err without
// reaching Redis.
type dropHook struct {
	err  error
	drop func(args []any) bool
}

func (h *dropHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *dropHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.drop(cmd.Args()) {
			if h.err != nil {
				cmd.SetErr(h.err)
			}
			return h.err
		}
		return next(ctx, cmd)
	}
}
func (h *dropHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRedisUnresponsive: three instances on go-redis's default client
// options (context deadlines not enforced on socket I/O) while Redis
// hangs (the process stopped) or answers every command 0.5 s late. The
// budget holds anyway: every instance says it is degraded within a few
// budgets, Share returns within the budget and a margin, no call waits on
// Redis, the local breakers open and close on their own; Redis back, the
// instances say so and, the downstream healthy, none opens again.
func TestRedisUnresponsive(t *testing.T) {
	if testing.Short() {
		t.Skip("real time against redis-server: not in -short")
	}
	for _, mode := range []string{"hung", "slow"} {
		t.Run(mode, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			srv := startRedis(t, "")
			addr := srv.addr
			var proxy *slowProxy
			if mode == "slow" {
				proxy = startSlowProxy(t, srv.addr)
				defer proxy.close()
				addr = proxy.addr()
			}
			const instances = 3
			const budget = 50 * time.Millisecond
			var mu sync.Mutex
			degradedAt := make([]time.Time, instances+1)
			answered := make([]bool, instances+1)
			newShared := func(i int, b *breaker.Breaker) (*shared.Shared, error) {
				return shared.Share(b, shared.Options{Client: defaultClient(t, addr), Name: "inventory", OnDegraded: func(err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						degradedAt[i], answered[i] = time.Now(), false
					} else {
						answered[i] = true
					}
				}})
			}
			bs := make([]*breaker.Breaker, instances)
			shs := make([]*shared.Shared, 0, instances+1)
			defer func() {
				for _, sh := range shs {
					sh.Close()
				}
			}()
			for i := range instances {
				bs[i] = must(breaker.New(fleetSettings(nil)))
				shs = append(shs, must(newShared(i, bs[i])))
			}
			var down atomic.Bool
			calls := startCallers(&down, bs...)
			defer func() {
				if calls != nil {
					calls.halt()
				}
			}()
			time.Sleep(300 * time.Millisecond)

			faulted := time.Now()
			if mode == "hung" {
				srv.stop(t)
			} else {
				proxy.setDelay(500 * time.Millisecond)
			}
			down.Store(true)
			took, ok := waitUntil(15*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				for i := range instances {
					if degradedAt[i].IsZero() {
						return false
					}
				}
				return true
			})
			t.Logf("%s Redis: every instance degraded %v after the fault (ok %t)", mode, took.Round(time.Millisecond), ok)
			if !ok || took > 100*time.Millisecond+10*budget {
				t.Errorf("%s Redis: every instance degraded after %v (ok %t), want within the sync and a few budgets (%v)", mode, took, ok, 100*time.Millisecond+10*budget)
			}
			start := time.Now()
			late, err := newShared(instances, must(breaker.New(fleetSettings(nil))))
			shareTook := time.Since(start)
			if err == nil {
				shs = append(shs, late)
			}
			t.Logf("%s Redis: Share took %v", mode, shareTook.Round(time.Millisecond))
			if err != nil || shareTook > budget+250*time.Millisecond {
				t.Errorf("%s Redis: Share took %v (err %v), want within the budget and a margin (%v)", mode, shareTook, err, budget+250*time.Millisecond)
			}
			if _, ok := waitUntil(5*time.Second, func() bool { return all(bs, breaker.StateOpen) }); !ok {
				t.Fatalf("%s Redis: the local breakers did not open on their own failures", mode)
			}
			t.Logf("%s Redis: every local breaker open %v after the fault", mode, time.Since(faulted).Round(time.Millisecond))
			down.Store(false)
			if _, ok := waitUntil(5*time.Second, func() bool { return all(bs, breaker.StateClosed) }); !ok {
				t.Fatalf("%s Redis: the local breakers did not close on their own probes", mode)
			}

			if mode == "hung" {
				srv.cont(t)
			} else {
				proxy.setDelay(0)
			}
			back, ok := waitUntil(10*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				for i := range instances {
					if !answered[i] {
						return false
					}
				}
				return true
			})
			t.Logf("%s Redis back: every instance answered again after %v (ok %t)", mode, back.Round(time.Millisecond), ok)
			if !ok {
				t.Fatalf("%s Redis back: not every instance said so within 10 s", mode)
			}
			opens := make([]uint64, instances)
			for i, b := range bs {
				opens[i] = b.Counts().Opens
			}
			time.Sleep(1500 * time.Millisecond)
			reopened := 0
			for i, b := range bs {
				if b.State() != breaker.StateClosed || b.Counts().Opens != opens[i] {
					reopened++
				}
			}
			calls.halt()
			longest := time.Duration(calls.longest.Load())
			calls = nil
			t.Logf("%s Redis back: %d of %d instances opened again against the healthy downstream", mode, reopened, instances)
			if reopened != 0 {
				t.Errorf("%s Redis back: %d instances opened again against a healthy downstream, want none", mode, reopened)
			}
			t.Logf("%s Redis: the longest call took %v", mode, longest)
			if longest > 20*time.Millisecond {
				t.Errorf("%s Redis: a call took %v, want no call waiting on Redis (under 20ms)", mode, longest)
			}
			for _, sh := range shs {
				start := time.Now()
				sh.Close()
				if d := time.Since(start); d > time.Second {
					t.Errorf("%s Redis back: Close took %v", mode, d)
				}
			}
			shs = nil
		})
	}
}

// TestLatestStatePublished: while Redis is slow (every reply 1 s late
// through a loopback proxy, past the budget), the breaker
// changes state many times (an operator's ForceOpen and Reset on the
// breaker itself, 600 changes at once, while the sharing goroutine has a
// close to publish), then opens on its own failures for a minute. Redis
// fast again, the state key says so, with the breaker's open-until: the
// latest state is published, however many changes came before it.
func TestLatestStatePublished(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := startRedis(t, "")
	proxy := startSlowProxy(t, srv.addr)
	defer proxy.close()
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: time.Minute, HalfOpenProbes: 1}))
	sh := must(shared.Share(b, shared.Options{Client: defaultClient(t, proxy.addr()), Name: "quotes"}))
	defer sh.Close()
	proxy.setDelay(time.Second)
	_ = b.ForceOpen()
	_ = b.Reset()
	time.Sleep(20 * time.Millisecond) // the close on its way to Redis
	for range 300 {
		_ = b.ForceOpen()
		_ = b.Reset()
	}
	for range 3 {
		_ = b.Do(context.Background(), func(context.Context) error { return errDown })
	}
	var oe *breaker.OpenError
	if err := b.Do(context.Background(), func(context.Context) error { return nil }); !errors.As(err, &oe) || oe.Until.IsZero() {
		t.Fatalf("after 3 failures: %v, want an OpenError with its open-until", err)
	}
	proxy.setDelay(0)
	reader := srv.client(t)
	var state string
	took, ok := waitUntil(3*time.Second, func() bool {
		state, _ = reader.Get(context.Background(), "callguard:breaker:{quotes}:state").Result()
		f := strings.Fields(state)
		if len(f) != 3 || f[0] != "open" {
			return false
		}
		// In Redis's clock, which is this machine's here, to within half
		// a round trip (the offset measured at each sync).
		ns, err := strconv.ParseInt(f[1], 10, 64)
		return err == nil && time.Duration(ns-oe.Until.UnixNano()).Abs() < 20*time.Millisecond
	})
	t.Logf("the state key %q %v after Redis was fast again (ok %t)", state, took.Round(time.Millisecond), ok)
	if !ok {
		t.Errorf("3 s after Redis was fast again the state key reads %q, want \"open %d <instance>\" (± 20 ms)", state, oe.Until.UnixNano())
	}
}
