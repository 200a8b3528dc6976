// Package shared shares a breaker's state among the instances of a
// service through Redis, so that a fleet learns an outage once instead of
// once per instance, and probes a recovering downstream with the
// configured number of probes, not that many per instance.
//
// A call never waits on Redis: the breaker runs where it always did, in
// the caller's process, lock-free; a goroutine per shared breaker (Share
// starts it, Close ends it) carries its changes out and the others' in:
//
//   - a trip: the instance whose breaker opens writes the state key (the
//     open-until time) and publishes it; every other instance opens until
//     the same time, if the fleet's counts support it (below);
//   - counts: every Sync (100 ms), each instance adds its calls and
//     failures since the last sync to per-second buckets in Redis and reads
//     the fleet's window back; when the fleet's failure rate trips the
//     breaker's rule, every instance opens on its own reading of the same
//     counts;
//   - half-open: when the open stay ends, one instance claims the probe
//     round (SET NX) and goes half-open with the breaker's probes; the
//     others stay open, one more stay at most, until that instance
//     publishes the outcome: closed (they close) or open again (they
//     follow). So the fleet sends HalfOpenProbes probes per round, not
//     HalfOpenProbes per instance;
//   - Redis down or slow: every operation has a deadline (Budget, 50 ms);
//     when one fails the instance goes on with its local breaker alone,
//     says so (Options.OnDegraded, Shared.Degraded), and reads the state
//     back when Redis answers again. The state key outlives instances: a
//     restarted instance reads it at Share.
//
// One misbehaving instance cannot open the fleet on its own view: a remote
// trip is followed only when the fleet's counts over the breaker's window
// show the failures of its rule (FailureRate of at least MinCalls calls;
// for a rule of consecutive failures alone, half the calls failing and at
// least ConsecutiveFailures failures).
package shared

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Options configure a shared breaker.
type Options struct {
	// Client is the Redis client: a *redis.Client, a *redis.ClusterClient
	// or a failover client (redis.UniversalClient).
	Client redis.UniversalClient
	// Name names the breaker in Redis: instances that share a breaker use
	// the same Name (keys "callguard:breaker:{Name}:…").
	Name string
	// Budget bounds every Redis operation (default 50 ms): past it, the
	// instance goes on alone until Redis answers again.
	Budget time.Duration
	// Sync is how often counts go to Redis and come back (default 100 ms).
	Sync time.Duration
	// OnDegraded is told when Redis stops answering (err) and when it
	// answers again (nil), on the goroutine whose operation saw it (the
	// sharing goroutine, or a caller of ForceOpen or Reset).
	OnDegraded func(err error)
	// Metrics, if set, gets the gauge callguard.shared.degraded (1 while
	// Redis does not answer, 0 otherwise), with callguard.breaker.name.
	Metrics metric.MeterProvider
}

// Shared is a breaker shared through Redis. Its methods are safe for
// concurrent use.
type Shared struct {
	b        *breaker.Breaker
	s        breaker.Settings
	o        Options
	id       string
	prefix   string
	degraded atomic.Bool

	reg     metric.Registration // the degraded gauge's callback
	changes chan breaker.StateChange
	stop    context.CancelFunc
	done    chan struct{}
	closeMu sync.Once

	sent struct{ calls, fails uint64 } // counts already added to Redis
	seen string                        // the last state message applied
}

var instances atomic.Uint64

// Share shares b, a breaker made by breaker.New with the native engine,
// through Redis, until Close. It reads the fleet's state first: an
// instance that starts while the fleet's breaker is open starts open.
func Share(b *breaker.Breaker, o Options) (*Shared, error) {
	switch {
	case b == nil:
		return nil, errors.New("shared: Share(nil, …): needs a breaker")
	case o.Client == nil:
		return nil, errors.New("shared: Options.Client is nil")
	case o.Name == "" || strings.ContainsAny(o.Name, "{}"):
		return nil, fmt.Errorf("shared: Options.Name = %q: must be set, without braces", o.Name)
	case o.Budget < 0:
		return nil, fmt.Errorf("shared: Options.Budget = %v: must be >= 0 (0: 50ms)", o.Budget)
	case o.Sync < 0:
		return nil, fmt.Errorf("shared: Options.Sync = %v: must be >= 0 (0: 100ms)", o.Sync)
	}
	s := b.Settings()
	if s.Engine != breaker.EngineNative {
		return nil, errors.New("shared: the breaker must use breaker.EngineNative (its state is moved by other instances)")
	}
	if o.Budget == 0 {
		o.Budget = 50 * time.Millisecond
	}
	if o.Sync == 0 {
		o.Sync = 100 * time.Millisecond
	}
	sh := &Shared{b: b, s: s, o: o,
		id:      fmt.Sprintf("%d-%d", time.Now().UnixNano(), instances.Add(1)),
		prefix:  "callguard:breaker:{" + o.Name + "}:",
		changes: make(chan breaker.StateChange, 64),
		done:    make(chan struct{}),
	}
	c := b.Counts()
	sh.sent.calls, sh.sent.fails = c.Successes+c.Failures+c.SlowUnanswered, c.Failures+c.SlowUnanswered
	bridge.BreakerWatch(b, "", func(sc breaker.StateChange) {
		select {
		case sh.changes <- sc:
		default: // the sharing goroutine is behind: the next sync reads the state anyway
		}
	})
	if o.Metrics != nil {
		g, err := o.Metrics.Meter("github.com/callguard/callguard").Int64ObservableGauge("callguard.shared.degraded",
			metric.WithDescription("1 while a shared breaker's Redis does not answer (the breaker is on its own), 0 otherwise."))
		if err != nil {
			return nil, fmt.Errorf("shared: Options.Metrics: %w", err)
		}
		name := metric.WithAttributes(attribute.String("callguard.breaker.name", o.Name))
		reg, err := o.Metrics.Meter("github.com/callguard/callguard").RegisterCallback(func(_ context.Context, ob metric.Observer) error {
			v := int64(0)
			if sh.Degraded() {
				v = 1
			}
			ob.ObserveInt64(g, v, name)
			return nil
		}, g)
		if err != nil {
			return nil, fmt.Errorf("shared: Options.Metrics: %w", err)
		}
		sh.reg = reg
	}
	ctx, stop := context.WithCancel(context.Background())
	sh.stop = stop
	// Subscribed before the state is read, so that no change falls between
	// them (if Redis does not answer, the subscription is made when it
	// does, and the state read then).
	sub := o.Client.Subscribe(ctx, sh.channel())
	_ = sh.op(ctx, func(ctx context.Context) error { _, err := sub.Receive(ctx); return err })
	sh.resync(ctx)
	go sh.run(ctx, sub)
	return sh, nil
}

// Close stops sharing: the breaker goes on alone. It waits for the sharing
// goroutine to end.
func (sh *Shared) Close() error {
	var err error
	sh.closeMu.Do(func() {
		sh.stop()
		<-sh.done
		if sh.reg != nil {
			err = sh.reg.Unregister()
		}
	})
	return err
}

// Degraded reports whether Redis failed to answer in time at the last
// operation: the breaker is on its own until it answers again.
func (sh *Shared) Degraded() bool { return sh.degraded.Load() }

// ForceOpen forces the breaker open on every instance, until Reset (the
// state key says so; instances started later read it).
func (sh *Shared) ForceOpen(ctx context.Context) error {
	if err := sh.b.ForceOpen(); err != nil {
		return err
	}
	return sh.publish(ctx, "forced")
}

// Disable disables the breaker on every instance (it counts and never
// trips), until Reset.
func (sh *Shared) Disable(ctx context.Context) error {
	if err := sh.b.Disable(); err != nil {
		return err
	}
	return sh.publish(ctx, "disabled")
}

// Reset ends a forced or disabled state, or a trip, on every instance.
func (sh *Shared) Reset(ctx context.Context) error {
	if err := sh.b.Reset(); err != nil {
		return err
	}
	return sh.publish(ctx, "closed")
}

// The state key holds, and the channel carries, "open <until-unix-ns>
// <instance>", "closed <instance>", "forced <instance>" or "disabled
// <instance>".
func (sh *Shared) stateKey() string { return sh.prefix + "state" }
func (sh *Shared) channel() string  { return sh.prefix + "changes" }

func (sh *Shared) bucketKeys(sec int64) (calls, fails string) {
	n := strconv.FormatInt(sec, 10)
	return sh.prefix + "c:" + n, sh.prefix + "f:" + n
}

// window is the breaker's counting window, in whole seconds (at least 1).
func (sh *Shared) window() int64 {
	w := sh.s.Window
	if w <= 0 {
		w = breaker.DefaultWindow
	}
	return max(int64((w+time.Second-1)/time.Second), 1)
}

// op runs f with the budget's deadline, and records Redis answering or
// not.
func (sh *Shared) op(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, sh.o.Budget)
	defer cancel()
	err := f(ctx)
	if err != nil && errors.Is(err, redis.Nil) {
		err = nil
	}
	was := sh.degraded.Swap(err != nil)
	if was != (err != nil) && sh.o.OnDegraded != nil {
		sh.o.OnDegraded(err)
	}
	return err
}

func (sh *Shared) publish(ctx context.Context, state string) error {
	msg := state + " " + sh.id
	var ttl time.Duration
	if state == "closed" {
		ttl = time.Hour
	}
	return sh.op(ctx, func(ctx context.Context) error {
		p := sh.o.Client.TxPipeline()
		p.Set(ctx, sh.stateKey(), msg, ttl)
		p.Publish(ctx, sh.channel(), msg)
		_, err := p.Exec(ctx)
		return err
	})
}

func (sh *Shared) publishOpen(ctx context.Context, until time.Time) error {
	msg := "open " + strconv.FormatInt(until.UnixNano(), 10) + " " + sh.id
	return sh.op(ctx, func(ctx context.Context) error {
		p := sh.o.Client.TxPipeline()
		p.Set(ctx, sh.stateKey(), msg, time.Until(until)+sh.s.OpenTimeout)
		p.Publish(ctx, sh.channel(), msg)
		_, err := p.Exec(ctx)
		return err
	})
}

// resync reads the fleet's state and applies it.
func (sh *Shared) resync(ctx context.Context) {
	var msg string
	if sh.op(ctx, func(ctx context.Context) error {
		var err error
		msg, err = sh.o.Client.Get(ctx, sh.stateKey()).Result()
		return err
	}) == nil && msg != "" {
		sh.apply(ctx, msg, false)
	}
}

// apply applies a state message; verify checks the fleet's counts before
// following a trip.
func (sh *Shared) apply(ctx context.Context, msg string, verify bool) {
	sh.seen = msg
	f := strings.Fields(msg)
	if len(f) < 2 || f[len(f)-1] == sh.id {
		return // malformed, or our own
	}
	switch f[0] {
	case "open":
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || len(f) != 3 {
			return
		}
		if verify && sh.b.State() == breaker.StateClosed && !sh.fleetTrips(ctx) {
			return // one instance's view, not the fleet's
		}
		bridge.BreakerOpenRemote(sh.b, time.Unix(0, ns))
	case "closed":
		if sh.b.Override() != breaker.OverrideNone {
			_ = sh.b.Reset()
			return
		}
		bridge.BreakerCloseRemote(sh.b)
	case "forced":
		_ = sh.b.ForceOpen()
	case "disabled":
		_ = sh.b.Disable()
	}
}

// fleetTrips pushes this instance's counts and reports whether the
// fleet's, over the breaker's window, meet its rule.
func (sh *Shared) fleetTrips(ctx context.Context) bool {
	calls, fails, err := sh.sync(ctx)
	if err != nil {
		return false
	}
	s := sh.s
	if s.FailureRate > 0 {
		return calls >= uint64(max(s.MinCalls, 1)) && float64(fails) >= s.FailureRate*float64(calls)
	}
	return s.ConsecutiveFailures > 0 && fails >= uint64(s.ConsecutiveFailures) && 2*fails >= calls
}

// sync adds this instance's calls and failures since the last sync to the
// current second's buckets, and returns the fleet's over the window.
func (sh *Shared) sync(ctx context.Context) (calls, fails uint64, err error) {
	c := sh.b.Counts()
	nowCalls, nowFails := c.Successes+c.Failures+c.SlowUnanswered, c.Failures+c.SlowUnanswered
	dc, df := nowCalls-sh.sent.calls, nowFails-sh.sent.fails
	sec := time.Now().Unix()
	w := sh.window()
	err = sh.op(ctx, func(ctx context.Context) error {
		p := sh.o.Client.Pipeline()
		ck, fk := sh.bucketKeys(sec)
		ttl := time.Duration(w+2) * time.Second
		if dc > 0 {
			p.IncrBy(ctx, ck, int64(dc))
			p.Expire(ctx, ck, ttl)
		}
		if df > 0 {
			p.IncrBy(ctx, fk, int64(df))
			p.Expire(ctx, fk, ttl)
		}
		keys := make([]string, 0, 2*w)
		for s := sec - w + 1; s <= sec; s++ {
			a, b := sh.bucketKeys(s)
			keys = append(keys, a, b)
		}
		got := p.MGet(ctx, keys...)
		state := p.Get(ctx, sh.stateKey())
		if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		// A change whose message this instance missed (published while
		// its subscription was being made again): the state key has it.
		if msg := state.Val(); msg != "" && msg != sh.seen {
			defer sh.apply(ctx, msg, true)
		}
		for i, v := range got.Val() {
			str, _ := v.(string)
			n, _ := strconv.ParseUint(str, 10, 64)
			if i%2 == 0 {
				calls += n
			} else {
				fails += n
			}
		}
		return nil
	})
	if err == nil {
		sh.sent.calls, sh.sent.fails = nowCalls, nowFails
	}
	return calls, fails, err
}

// run is the sharing goroutine.
func (sh *Shared) run(ctx context.Context, sub *redis.PubSub) {
	defer close(sh.done)
	defer sub.Close()
	msgs := sub.Channel()
	tick := time.NewTicker(sh.o.Sync)
	defer tick.Stop()
	var claim *time.Timer
	defer func() {
		if claim != nil {
			claim.Stop()
		}
	}()
	claimAt := make(chan time.Time, 1)
	var claimed time.Time // the round this instance last claimed (or lost)
	armClaim := func() {
		until := bridge.BreakerOpenUntil(sh.b)
		if until.IsZero() || until.Equal(claimed) {
			return
		}
		if claim != nil {
			claim.Stop()
		}
		// Just before the stay ends: claim the probe round, or stay open.
		claim = time.AfterFunc(max(time.Until(until)-sh.o.Sync/2, 0), func() {
			select {
			case claimAt <- until:
			default:
			}
		})
	}
	wasDegraded := false
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			sh.apply(ctx, m.Payload, true)
			armClaim()
		case sc := <-sh.changes:
			switch {
			case sc.To == breaker.StateOpen && sh.b.Override() == breaker.OverrideNone:
				if until := bridge.BreakerOpenUntil(sh.b); !until.IsZero() {
					_ = sh.publishOpen(ctx, until)
				}
				armClaim()
			case sc.To == breaker.StateClosed && sc.From == breaker.StateHalfOpen:
				_ = sh.publish(ctx, "closed")
			}
		case until := <-claimAt:
			if !until.Equal(claimed) {
				claimed = until
				sh.claimRound(ctx, until)
			}
			armClaim()
		case <-tick.C:
			if sh.b.State() == breaker.StateClosed && sh.fleetTrips(ctx) {
				until := time.Now().Add(sh.s.OpenTimeout)
				if bridge.BreakerOpenRemote(sh.b, until) {
					_ = sh.publishOpen(ctx, until)
					armClaim()
				}
			}
			if wasDegraded && !sh.Degraded() {
				sh.resync(ctx) // Redis is back: read what changed meanwhile
				armClaim()
			}
			wasDegraded = sh.Degraded()
		}
	}
}

// claimRound claims the probe round of the stay that ends at until: the
// instance that claims it goes half-open when the stay ends; the others
// stay open one more stay, or until it publishes the outcome. Without
// Redis, the instance probes on its own.
func (sh *Shared) claimRound(ctx context.Context, until time.Time) {
	var won bool
	err := sh.op(ctx, func(ctx context.Context) error {
		var err error
		won, err = sh.o.Client.SetNX(ctx, sh.prefix+"probe:"+strconv.FormatInt(until.UnixNano(), 10), sh.id, 2*sh.s.OpenTimeout).Result()
		return err
	})
	if err != nil || won {
		return
	}
	bridge.BreakerOpenRemote(sh.b, until.Add(sh.s.OpenTimeout))
}
