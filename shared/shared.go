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
	"crypto/rand"
	"encoding/hex"
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
	// Sync is how often counts go to Redis and the fleet's counts and state
	// come back (default 100 ms).
	Sync time.Duration
	// OnDegraded is told when Redis stops answering (err) and when it
	// answers again (nil), on the goroutine whose operation saw it (the
	// sharing goroutine, or a caller of ForceOpen, Disable or Reset). It
	// must not call Close.
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
	unwatch func()              // removes the receiver of the breaker's changes
	changes chan breaker.StateChange
	stop    context.CancelFunc
	done    chan struct{}
	closeMu sync.Once

	// The sharing goroutine's own (and Share's, before it starts):
	sent     struct{ calls, fails uint64 } // counts already added to Redis
	seen     string                        // the last state message applied
	expected struct{ open, closed int }    // state changes this goroutine made, not to publish again
}

// Share shares b, a breaker made by breaker.New with the native engine,
// through Redis, until Close. It reads the fleet's state first: an
// instance that starts while the fleet's breaker is open (and the fleet's
// counts support it) starts open. Share a breaker with one Shared at a
// time.
func Share(b *breaker.Breaker, o Options) (*Shared, error) {
	switch {
	case b == nil:
		return nil, errors.New("shared: Share(nil, …): needs a breaker")
	case o.Client == nil:
		return nil, errors.New("shared: Options.Client is nil")
	case o.Name == "" || strings.ContainsAny(o.Name, "{} "):
		return nil, fmt.Errorf("shared: Options.Name = %q: must be set, without braces or spaces", o.Name)
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
	var idBytes [8]byte
	_, _ = rand.Read(idBytes[:])
	sh := &Shared{b: b, s: s, o: o,
		id:      hex.EncodeToString(idBytes[:]),
		prefix:  "callguard:breaker:{" + o.Name + "}:",
		changes: make(chan breaker.StateChange, 256),
		done:    make(chan struct{}),
	}
	c := b.Counts()
	sh.sent.calls, sh.sent.fails = c.Successes+c.Failures+c.SlowUnanswered, c.Failures
	if o.Metrics != nil {
		m := o.Metrics.Meter("github.com/callguard/callguard")
		g, err := m.Int64ObservableGauge("callguard.shared.degraded",
			metric.WithDescription("1 while a shared breaker's Redis does not answer (the breaker is on its own), 0 otherwise."))
		if err != nil {
			return nil, fmt.Errorf("shared: Options.Metrics: %w", err)
		}
		name := metric.WithAttributes(attribute.String("callguard.breaker.name", o.Name))
		reg, err := m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
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
	sh.unwatch = bridge.BreakerWatch(b, "", func(sc breaker.StateChange) {
		select {
		case sh.changes <- sc:
		default: // 256 changes behind: the state key tells the others at their next sync
		}
	})
	ctx, stop := context.WithCancel(context.Background())
	sh.stop = stop
	// Subscribed before the state is read, so that no change falls between
	// them, within the budget (go-redis makes the subscription when Redis
	// answers, if it does not now; the state is then read at a sync).
	sub := o.Client.Subscribe(ctx)
	_ = sh.op(ctx, func(ctx context.Context) error { return sub.Subscribe(ctx, sh.channel()) })
	if calls, fails, msg, err := sh.sync(ctx); err == nil && msg != "" {
		sh.apply(msg, calls, fails)
	}
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
		sh.unwatch()
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
	return sh.operator(ctx, "forced")
}

// Disable disables the breaker on every instance (it counts and never
// trips), until Reset.
func (sh *Shared) Disable(ctx context.Context) error {
	if err := sh.b.Disable(); err != nil {
		return err
	}
	return sh.operator(ctx, "disabled")
}

// Reset ends a forced or disabled state, or a trip, on every instance,
// and clears the fleet's counts.
func (sh *Shared) Reset(ctx context.Context) error {
	if err := sh.b.Reset(); err != nil {
		return err
	}
	return sh.operator(ctx, "reset")
}

// The state key holds, and the channel carries, "open <until-unix-ns>
// <instance>" and "closed <instance>" (the breakers' own changes), or
// "forced <instance>", "disabled <instance>" and "reset <instance>" (an
// operator's). A breaker's own change never overwrites an operator's
// forced or disabled state.
func (sh *Shared) stateKey() string { return sh.prefix + "state" }
func (sh *Shared) channel() string  { return sh.prefix + "changes" }

func (sh *Shared) bucketKeys(sec int64) (calls, fails string) {
	n := strconv.FormatInt(sec, 10)
	return sh.prefix + "c:" + n, sh.prefix + "f:" + n
}

// windowKeys are the bucket keys of the window ending at sec.
func (sh *Shared) windowKeys(sec int64) []string {
	w := sh.window()
	keys := make([]string, 0, 2*w)
	for s := sec - w + 1; s <= sec; s++ {
		a, b := sh.bucketKeys(s)
		keys = append(keys, a, b)
	}
	return keys
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
// not (an operation that ctx itself ended says nothing about Redis).
func (sh *Shared) op(ctx context.Context, f func(ctx context.Context) error) error {
	octx, cancel := context.WithTimeout(ctx, sh.o.Budget)
	defer cancel()
	err := f(octx)
	if err != nil && errors.Is(err, redis.Nil) {
		err = nil
	}
	if ctx.Err() != nil {
		return err
	}
	was := sh.degraded.Swap(err != nil)
	if was != (err != nil) && sh.o.OnDegraded != nil {
		sh.o.OnDegraded(err)
	}
	return err
}

// natural writes and publishes a breaker's own change, unless an operator
// forced or disabled the breaker; a close also clears the fleet's counts,
// which are the outage's.
var natural = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and (string.sub(v, 1, 7) == 'forced ' or string.sub(v, 1, 9) == 'disabled ') then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('PUBLISH', KEYS[2], ARGV[1])
for i = 3, #KEYS do redis.call('DEL', KEYS[i]) end
return 1`)

func (sh *Shared) publishNatural(ctx context.Context, msg string, ttl time.Duration, clear bool) error {
	keys := []string{sh.stateKey(), sh.channel()}
	if clear {
		keys = append(keys, sh.windowKeys(time.Now().Unix())...)
	}
	return sh.op(ctx, func(ctx context.Context) error {
		return natural.Run(ctx, sh.o.Client, keys, msg, max(ttl, time.Millisecond).Milliseconds()).Err()
	})
}

func (sh *Shared) publishOpen(ctx context.Context, until time.Time) error {
	return sh.publishNatural(ctx, "open "+strconv.FormatInt(until.UnixNano(), 10)+" "+sh.id, time.Until(until)+sh.s.OpenTimeout, false)
}

func (sh *Shared) publishClosed(ctx context.Context) error {
	return sh.publishNatural(ctx, "closed "+sh.id, time.Hour, true)
}

// operator writes and publishes an operator's change; a reset clears the
// fleet's counts.
func (sh *Shared) operator(ctx context.Context, verb string) error {
	msg := verb + " " + sh.id
	return sh.op(ctx, func(ctx context.Context) error {
		p := sh.o.Client.TxPipeline()
		p.Set(ctx, sh.stateKey(), msg, 0)
		p.Publish(ctx, sh.channel(), msg)
		if verb == "reset" {
			p.Del(ctx, sh.windowKeys(time.Now().Unix())...)
		}
		_, err := p.Exec(ctx)
		return err
	})
}

// apply applies a state message, with the fleet's counts to check a trip
// against; on the sharing goroutine (or in Share, before it starts).
func (sh *Shared) apply(msg string, calls, fails uint64) {
	sh.seen = msg
	f := strings.Fields(msg)
	if len(f) < 2 || f[len(f)-1] == sh.id {
		return // malformed, or our own
	}
	before := sh.b.State()
	switch f[0] {
	case "open":
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || len(f) != 3 {
			return
		}
		if before == breaker.StateClosed && !sh.trips(calls, fails) {
			sh.seen = "" // one instance's view, not the fleet's (yet): checked again at the next sync
			return
		}
		bridge.BreakerOpenRemote(sh.b, time.Unix(0, ns))
	case "closed":
		if sh.b.Override() != breaker.OverrideNone {
			return // an operator's state stays until an operator's reset
		}
		bridge.BreakerCloseRemote(sh.b)
	case "reset":
		_ = sh.b.Reset()
	case "forced":
		_ = sh.b.ForceOpen()
	case "disabled":
		_ = sh.b.Disable()
	}
	switch after := sh.b.State(); {
	case after == before:
	case after == breaker.StateOpen:
		sh.expected.open++
	case after == breaker.StateClosed:
		sh.expected.closed++
	}
}

// trips reports whether the fleet's counts over the breaker's window meet
// its rule: FailureRate of at least MinCalls calls; for a rule of
// consecutive failures alone, at least ConsecutiveFailures failures and
// half the calls failing. (Slow calls count as calls, not failures; a rule
// of SlowCallRate alone is not shared.)
func (sh *Shared) trips(calls, fails uint64) bool {
	s := sh.s
	if s.FailureRate > 0 {
		return calls >= uint64(max(s.MinCalls, 1)) && float64(fails) >= s.FailureRate*float64(calls)
	}
	return s.ConsecutiveFailures > 0 && fails >= uint64(s.ConsecutiveFailures) && 2*fails >= calls
}

// sync adds this instance's calls and failures since the last sync to the
// current second's buckets, and returns the fleet's over the window and
// the state key. What could not be added (Redis down) is dropped: an
// outage's worth of one instance's counts, added at once when Redis
// answers again, would trip the fleet on a view of its own.
func (sh *Shared) sync(ctx context.Context) (calls, fails uint64, state string, err error) {
	c := sh.b.Counts()
	nowCalls, nowFails := c.Successes+c.Failures+c.SlowUnanswered, c.Failures
	dc, df := nowCalls-sh.sent.calls, nowFails-sh.sent.fails
	sh.sent.calls, sh.sent.fails = nowCalls, nowFails
	sec := time.Now().Unix()
	err = sh.op(ctx, func(ctx context.Context) error {
		p := sh.o.Client.Pipeline()
		ck, fk := sh.bucketKeys(sec)
		ttl := time.Duration(sh.window()+2) * time.Second
		if dc > 0 {
			p.IncrBy(ctx, ck, int64(dc))
			p.Expire(ctx, ck, ttl)
		}
		if df > 0 {
			p.IncrBy(ctx, fk, int64(df))
			p.Expire(ctx, fk, ttl)
		}
		got := p.MGet(ctx, sh.windowKeys(sec)...)
		st := p.Get(ctx, sh.stateKey())
		if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
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
		state = st.Val()
		return nil
	})
	return calls, fails, state, err
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
	var armed, claimed time.Time // the round a claim is set for, and the last claimed (or lost)
	armClaim := func() {
		until := bridge.BreakerOpenUntil(sh.b)
		if until.IsZero() || until.Equal(claimed) || until.Equal(armed) {
			return
		}
		if claim != nil {
			claim.Stop()
		}
		armed = until
		// Ahead of the stay's end by a sync and two operations: the claim
		// is settled before a caller can take the breaker half-open.
		claim = time.AfterFunc(max(time.Until(until)-sh.o.Sync-2*sh.o.Budget, 0), func() {
			select {
			case claimAt <- until:
			default:
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			if m.Payload == sh.seen {
				break // read from the state key already
			}
			var calls, fails uint64
			if strings.HasPrefix(m.Payload, "open ") && sh.b.State() == breaker.StateClosed {
				var err error
				if calls, fails, _, err = sh.sync(ctx); err != nil {
					break // cannot check the fleet's counts: stay as we are
				}
			}
			sh.apply(m.Payload, calls, fails)
			armClaim()
		case sc := <-sh.changes:
			switch sc.To {
			case breaker.StateOpen:
				if sh.expected.open > 0 {
					sh.expected.open--
				} else if until := bridge.BreakerOpenUntil(sh.b); sh.b.Override() == breaker.OverrideNone && !until.IsZero() {
					_ = sh.publishOpen(ctx, until)
				}
				armClaim()
			case breaker.StateClosed:
				if sh.expected.closed > 0 {
					sh.expected.closed--
				} else if sh.b.Override() == breaker.OverrideNone && sh.b.State() == breaker.StateClosed {
					_ = sh.publishClosed(ctx)
				}
			}
		case until := <-claimAt:
			if !until.Equal(claimed) {
				claimed = until
				sh.claimRound(ctx, until)
			}
			armClaim()
		case <-tick.C:
			calls, fails, msg, err := sh.sync(ctx)
			if err != nil {
				break
			}
			if msg != "" && msg != sh.seen {
				sh.apply(msg, calls, fails) // a change whose message this instance missed
				armClaim()
			}
			if sh.b.State() == breaker.StateClosed && sh.b.Override() == breaker.OverrideNone && sh.trips(calls, fails) {
				if until := bridge.BreakerTrip(sh.b); !until.IsZero() {
					sh.expected.open++
					_ = sh.publishOpen(ctx, until)
					armClaim()
				}
			}
		}
	}
}

// claimRound claims the probe round of the stay that ends at until: the
// instance that claims it goes half-open when the stay ends; the others
// stay open one more stay, or until it publishes the outcome. Without
// Redis, the instance probes on its own.
func (sh *Shared) claimRound(ctx context.Context, until time.Time) {
	if !bridge.BreakerOpenUntil(sh.b).Equal(until) {
		return // the stay changed since (closed, extended, forced): no round to claim
	}
	var won bool
	err := sh.op(ctx, func(ctx context.Context) error {
		var err error
		won, err = sh.o.Client.SetNX(ctx, sh.prefix+"probe:"+strconv.FormatInt(until.UnixNano(), 10), sh.id, 2*sh.s.OpenTimeout).Result()
		return err
	})
	if err != nil || won {
		return
	}
	if !bridge.BreakerOpenUntil(sh.b).Equal(until) {
		return // closed, or extended, during the claim
	}
	before := sh.b.State()
	bridge.BreakerOpenRemote(sh.b, until.Add(sh.s.OpenTimeout))
	if before != breaker.StateOpen && sh.b.State() == breaker.StateOpen {
		sh.expected.open++ // late: it had gone half-open; not a change to publish
	}
}
