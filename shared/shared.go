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
//     round (named by the open-until the state key holds: the first open
//     stored names the stay, whatever messages were lost) and goes
//     half-open with the breaker's probes; the others stay open, one more
//     stay at most, until that instance publishes the outcome: closed
//     (they close) or open again (they follow). So the fleet sends
//     HalfOpenProbes probes per round, not HalfOpenProbes per instance;
//   - Redis down or slow: every operation has a deadline (Budget, 50 ms),
//     held whatever the client's options (the operation is abandoned at
//     it, one at a time); when one fails the instance goes on with its
//     local breaker alone, says so (Options.OnDegraded, Shared.Degraded),
//     and reads the state back when Redis answers again. The state key
//     outlives instances: a restarted instance reads it at Share.
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
	// or a failover client (redis.UniversalClient). The budget holds
	// whatever its options; with ContextTimeoutEnabled set, an operation
	// abandoned at the budget also ends at once in the client (and Close
	// does not wait for the client's own ReadTimeout).
	Client redis.UniversalClient
	// Name names the breaker in Redis: instances that share a breaker use
	// the same Name (keys "callguard:breaker:{Name}:…").
	Name string
	// Budget bounds every Redis operation (default 50 ms), whatever the
	// client does with context deadlines: past it, the operation is
	// abandoned (its late answer dropped) and the instance goes on alone
	// until Redis answers again. One operation runs at a time: one that
	// finds the last still running waits for it within its own budget.
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

	skew time.Duration // this instance's clock's error (tests only: export_test.go)
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
	changed chan struct{}       // a state change to look at (coalesced: the goroutine reads the latest state)
	ctx     context.Context     // ended by Close
	stop    context.CancelFunc
	done    chan struct{}
	closeMu sync.Once

	// One Redis operation at a time: a token in slot while it runs, held
	// until it returns even when its caller stopped waiting at the budget.
	slot   chan struct{}
	opsMu  sync.Mutex // guards closed and the Add of ops
	closed bool
	ops    sync.WaitGroup

	// The sharing goroutine's own (and Share's, before it starts):
	sent      struct{ calls, fails uint64 } // counts already added to Redis
	seen      string                        // the last state message applied or published
	toldOpens uint64                        // the breaker's Opens when its open state was last told or applied
	owesClose bool                          // the fleet may hold this instance open (it published or followed an open, or probes): a close must be published

	// Times cross instances in Redis's clock, not this machine's: offset
	// is Redis's TIME minus this instance's wall clock (ns), measured at
	// every sync; skew shifts this instance's wall clock (tests only: a
	// machine whose clock is off).
	offset atomic.Int64
	skew   time.Duration
}

// toServer is t (this process's time) in Redis's clock, as Unix ns.
func (sh *Shared) toServer(t time.Time) int64 {
	return t.Add(sh.skew).UnixNano() + sh.offset.Load()
}

// fromServer is a Unix ns time in Redis's clock in this process's.
func (sh *Shared) fromServer(ns int64) time.Time {
	return time.Unix(0, ns-sh.offset.Load()).Add(-sh.skew)
}

// redisTime reads the answer of a script returning TIME.
func redisTime(c *redis.Cmd) (time.Time, error) {
	v, err := c.Slice()
	if err != nil || len(v) != 2 {
		return time.Time{}, fmt.Errorf("TIME: %v %v", v, err)
	}
	secs, ok1 := v[0].(string)
	usecs, ok2 := v[1].(string)
	sec, err1 := strconv.ParseInt(secs, 10, 64)
	usec, err2 := strconv.ParseInt(usecs, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return time.Time{}, fmt.Errorf("TIME: %v", v)
	}
	return time.Unix(sec, usec*1000), nil
}

// serverSec is Redis's second now: the counts' buckets are named by it.
func (sh *Shared) serverSec() int64 { return sh.toServer(time.Now()) / int64(time.Second) }

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
	sh := &Shared{b: b, s: s, o: o, skew: o.skew,
		id:      hex.EncodeToString(idBytes[:]),
		prefix:  "callguard:breaker:{" + o.Name + "}:",
		changed: make(chan struct{}, 1),
		done:    make(chan struct{}),
		slot:    make(chan struct{}, 1),
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
	sh.unwatch = bridge.BreakerWatch(b, "", func(breaker.StateChange) {
		select {
		case sh.changed <- struct{}{}:
		default: // a look is due already: it reads the latest state
		}
	})
	sh.ctx, sh.stop = context.WithCancel(context.Background())
	ctx := sh.ctx
	sh.toldOpens = b.Counts().Opens
	// Subscribed before the state is read, so that no change falls between
	// them, both within one budget (go-redis makes the subscription when
	// Redis answers, if it does not now; the state is then read at a sync).
	deadline := time.Now().Add(o.Budget)
	sub := o.Client.Subscribe(ctx)
	_, _ = do(sh, ctx, deadline, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, sub.Subscribe(ctx, sh.channel())
	})
	if r, err := sh.syncUntil(ctx, deadline); err == nil && r.state != "" {
		sh.apply(r.state, r.calls, r.fails, r.trusted)
	}
	go sh.run(ctx, sub)
	return sh, nil
}

// Close stops sharing: the breaker goes on alone. It waits for the sharing
// goroutine to end, and for a Redis operation in flight to return: Close
// cancels its context, which ends it at once with a client that honours
// contexts (redis.Options.ContextTimeoutEnabled); otherwise the client's
// own timeouts end it. After Close, ForceOpen, Disable and Reset change
// the local breaker only, and return ErrClosed.
func (sh *Shared) Close() error {
	var err error
	sh.closeMu.Do(func() {
		sh.stop()
		<-sh.done
		sh.opsMu.Lock()
		sh.closed = true
		sh.opsMu.Unlock()
		sh.ops.Wait()
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

// ErrClosed is returned by ForceOpen, Disable and Reset after Close: the
// local breaker changed, the fleet was not told.
var ErrClosed = errors.New("shared: closed")

// ErrBudget is the error OnDegraded gets when Redis did not answer within
// the budget (Options.Budget), or had not yet answered the operation
// before (one operation at a time).
var ErrBudget = errors.New("shared: Redis did not answer within the budget")

// op runs f within the budget; see do.
func (sh *Shared) op(ctx context.Context, f func(ctx context.Context) error) error {
	_, err := do(sh, ctx, time.Now().Add(sh.o.Budget), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, f(ctx)
	})
	return err
}

// do runs f on a goroutine of its own with a context that ends at
// deadline, and returns its result if it comes by then: past the deadline
// it returns ErrBudget whatever the client does with the context (a client
// without ContextTimeoutEnabled ignores it on socket I/O), and f's late
// result is dropped. One operation runs at a time per shared breaker: an
// operation that finds the last one still running waits for it until its
// own deadline, so that nothing piles up behind a hung Redis. It records
// Redis answering or not (an operation that ctx itself ended says nothing
// about Redis).
func do[T any](sh *Shared, ctx context.Context, deadline time.Time, f func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	type result struct {
		v   T
		err error
	}
	var r result
	select {
	case sh.slot <- struct{}{}:
		sh.opsMu.Lock()
		if sh.closed {
			sh.opsMu.Unlock()
			<-sh.slot
			return zero, ErrClosed
		}
		sh.ops.Add(1)
		sh.opsMu.Unlock()
		octx, cancel := context.WithDeadline(ctx, deadline)
		stopOnClose := context.AfterFunc(sh.ctx, cancel)
		res := make(chan result, 1)
		go func() {
			defer sh.ops.Done()
			defer func() { <-sh.slot }()
			defer cancel()
			defer stopOnClose()
			v, err := f(octx)
			if errors.Is(err, redis.Nil) {
				err = nil
			}
			res <- result{v, err}
		}()
		select {
		case r = <-res:
		case <-t.C:
			r.err = ErrBudget
		case <-ctx.Done():
			r.err = ctx.Err()
		}
	case <-t.C:
		r.err = ErrBudget
	case <-ctx.Done():
		r.err = ctx.Err()
	}
	if ctx.Err() != nil {
		return r.v, r.err
	}
	was := sh.degraded.Swap(r.err != nil)
	if was != (r.err != nil) && sh.o.OnDegraded != nil {
		sh.o.OnDegraded(r.err)
	}
	return r.v, r.err
}

// natural writes and publishes a breaker's own change, unless an operator
// forced or disabled the breaker, and returns the state key afterwards. An
// open does not replace an open stay still running (ARGV[3], the time now,
// is before its until) unless this instance holds that stay's probe round
// (it re-opens after its probes): the first open stored names the stay and
// its probe round for the fleet, and the instance adopts it. A close also
// clears the fleet's counts, which are the outage's. Run with EVAL (one
// round trip: no NOSCRIPT fallback to eat the budget).
const naturalScript = `
local v = redis.call('GET', KEYS[1])
if v and (string.sub(v, 1, 7) == 'forced ' or string.sub(v, 1, 9) == 'disabled ') then return v end
if v and string.sub(ARGV[1], 1, 5) == 'open ' then
  local u = string.match(v, '^open (%d+) ')
  if u and tonumber(u) > tonumber(ARGV[3]) and redis.call('GET', KEYS[3]) ~= u .. ' ' .. ARGV[4] then return v end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('PUBLISH', KEYS[2], ARGV[1])
for i = 4, #KEYS do redis.call('DEL', KEYS[i]) end
return ARGV[1]`

// publishNatural runs naturalScript and returns the state key it leaves.
func (sh *Shared) publishNatural(ctx context.Context, msg string, ttl time.Duration, clear bool) (string, error) {
	keys := []string{sh.stateKey(), sh.channel(), sh.probeKey()}
	if clear {
		keys = append(keys, sh.windowKeys(sh.serverSec())...)
	}
	now := strconv.FormatInt(sh.toServer(time.Now()), 10)
	return do(sh, ctx, time.Now().Add(sh.o.Budget), func(ctx context.Context) (string, error) {
		return sh.o.Client.Eval(ctx, naturalScript, keys, msg, max(ttl, time.Millisecond).Milliseconds(), now, sh.id).Text()
	})
}

// openMsg is the state of a stay open until until: in Redis's clock.
func (sh *Shared) openMsg(until time.Time) string {
	return "open " + strconv.FormatInt(sh.toServer(until), 10) + " " + sh.id
}

// openUntilOf parses "open <until> <instance>", in this process's time.
func (sh *Shared) openUntilOf(msg string) (time.Time, bool) {
	f := strings.Fields(msg)
	if len(f) != 3 || f[0] != "open" {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return sh.fromServer(ns), true
}

func (sh *Shared) probeKey() string { return sh.prefix + "probe" }

// operator writes and publishes an operator's change; a reset clears the
// fleet's counts.
func (sh *Shared) operator(ctx context.Context, verb string) error {
	msg := verb + " " + sh.id
	return sh.op(ctx, func(ctx context.Context) error {
		p := sh.o.Client.TxPipeline()
		p.Set(ctx, sh.stateKey(), msg, 0)
		p.Publish(ctx, sh.channel(), msg)
		if verb == "reset" {
			p.Del(ctx, sh.windowKeys(sh.serverSec())...)
		}
		_, err := p.Exec(ctx)
		return err
	})
}

// apply applies a state message, with the fleet's counts to check a trip
// against (trusted: counts read after the last close this instance knows
// of); on the sharing goroutine (or in Share, before it starts).
func (sh *Shared) apply(msg string, calls, fails uint64, trusted bool) {
	sh.seen = msg
	f := strings.Fields(msg)
	if len(f) < 2 || f[len(f)-1] == sh.id {
		return // malformed, or our own
	}
	switch f[0] {
	case "open":
		until, ok := sh.openUntilOf(msg)
		if !ok {
			return
		}
		if sh.b.State() == breaker.StateClosed && !(trusted && sh.trips(calls, fails)) {
			sh.seen = "" // one instance's view, not the fleet's (yet): checked again at the next sync
			return
		}
		if bridge.BreakerOpenRemote(sh.b, until) || sh.b.State() != breaker.StateClosed {
			sh.owesClose = true // if this instance's probes close it, the fleet must hear it
		}
	case "closed":
		if sh.b.Override() != breaker.OverrideNone {
			return // an operator's state stays until an operator's reset
		}
		bridge.BreakerCloseRemote(sh.b)
		sh.owesClose = false
	case "reset":
		_ = sh.b.Reset()
		sh.owesClose = false
	case "forced":
		_ = sh.b.ForceOpen()
	case "disabled":
		_ = sh.b.Disable()
	}
	sh.toldOpens = sh.b.Counts().Opens // a change applied, not one to publish
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

// syncResult is what a sync reads back: the fleet's counts over the
// window, the state key, and whether the counts can be trusted to trip on
// (see sync).
type syncResult struct {
	calls, fails uint64
	state        string
	trusted      bool
}

// sync adds this instance's calls and failures since the last sync to the
// current second's buckets, and returns the fleet's over the window and
// the state key. What could not be added (Redis down) is dropped: an
// outage's worth of one instance's counts, added at once when Redis
// answers again, would trip the fleet on a view of its own. The counts are
// not trusted when the breaker closed while the sync was in flight, or
// when a close of this instance is not yet published (the window not yet
// cleared): they are the outage's, and would re-open the fleet on a
// healthy downstream.
func (sh *Shared) sync(ctx context.Context) (syncResult, error) {
	return sh.syncUntil(ctx, time.Now().Add(sh.o.Budget))
}

func (sh *Shared) syncUntil(ctx context.Context, deadline time.Time) (syncResult, error) {
	c := sh.b.Counts()
	stBefore, opensBefore := sh.b.State(), c.Opens
	nowCalls, nowFails := c.Successes+c.Failures+c.SlowUnanswered, c.Failures
	dc, df := nowCalls-sh.sent.calls, nowFails-sh.sent.fails
	sh.sent.calls, sh.sent.fails = nowCalls, nowFails
	sec := sh.serverSec()
	ck, fk := sh.bucketKeys(sec)
	ttl := time.Duration(sh.window()+2) * time.Second
	window, stateKey := sh.windowKeys(sec), sh.stateKey()
	r, err := do(sh, ctx, deadline, func(ctx context.Context) (syncResult, error) {
		var r syncResult
		p := sh.o.Client.Pipeline()
		if dc > 0 {
			p.IncrBy(ctx, ck, int64(dc))
			p.Expire(ctx, ck, ttl)
		}
		if df > 0 {
			p.IncrBy(ctx, fk, int64(df))
			p.Expire(ctx, fk, ttl)
		}
		got := p.MGet(ctx, window...)
		st := p.Get(ctx, stateKey)
		// TIME of the node that holds the breaker's keys (in a Cluster,
		// another node's clock may differ).
		tm := p.Eval(ctx, "return redis.call('TIME')", []string{stateKey})
		sent := time.Now()
		if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return r, err
		}
		if server, err := redisTime(tm); err == nil {
			// Redis read its clock between the send and the answer: at
			// the midpoint, within half the round trip.
			mid := sent.Add(time.Since(sent) / 2)
			sh.offset.Store(server.UnixNano() - mid.Add(sh.skew).UnixNano())
		}
		for i, v := range got.Val() {
			str, _ := v.(string)
			n, _ := strconv.ParseUint(str, 10, 64)
			if i%2 == 0 {
				r.calls += n
			} else {
				r.fails += n
			}
		}
		r.state = st.Val()
		return r, nil
	})
	r.trusted = err == nil && !sh.owesClose && stBefore == breaker.StateClosed &&
		sh.b.State() == breaker.StateClosed && sh.b.Counts().Opens == opensBefore
	return r, err
}

// reconcile tells the fleet the breaker's own latest state, if the fleet
// was not told it: an open stay the breaker entered on its own (a trip, a
// failed probe), or a close after an open of this instance may have
// reached Redis. It reads the breaker's state now, not the changes that
// led to it (however many came while Redis was slow, the latest state is
// the one published), and is tried again at every sync until Redis takes
// it.
func (sh *Shared) reconcile(ctx context.Context) {
	if sh.b.Override() != breaker.OverrideNone {
		return // an operator's state, published by ForceOpen, Disable or Reset
	}
	opens := sh.b.Counts().Opens
	switch sh.b.State() {
	case breaker.StateOpen:
		until := bridge.BreakerOpenUntil(sh.b)
		if opens == sh.toldOpens || until.IsZero() {
			return
		}
		sh.owesClose = true
		msg := sh.openMsg(until)
		stored, err := sh.publishNatural(ctx, msg, time.Until(until)+sh.s.OpenTimeout, false)
		if err != nil {
			return
		}
		sh.toldOpens = opens
		switch u, ok := sh.openUntilOf(stored); {
		case stored == msg:
			sh.seen = stored
		case ok:
			// The fleet's stay began first: adopt its until (the round is
			// named by it), staying open at least as long as our own.
			sh.seen = stored
			bridge.BreakerOpenRemote(sh.b, u)
			sh.toldOpens = sh.b.Counts().Opens
		default:
			// An operator's state the script kept (forced, disabled):
			// applied here, not only marked seen, or the syncs after would
			// take it for applied and this instance would never follow it.
			sh.apply(stored, 0, 0, false)
		}
	case breaker.StateClosed:
		sh.toldOpens = opens // an open and its close both came while we looked away
		if !sh.owesClose {
			return
		}
		msg := "closed " + sh.id
		if stored, err := sh.publishNatural(ctx, msg, time.Hour, true); err == nil {
			sh.owesClose = false
			if stored == msg {
				sh.seen = msg
			} else {
				sh.apply(stored, 0, 0, false) // an operator's state, kept
			}
		}
	}
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
	var armed, claimed time.Time // the stay a claim is set for, and the last claimed (or lost)
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
			var r syncResult
			if strings.HasPrefix(m.Payload, "open ") && sh.b.State() == breaker.StateClosed {
				var err error
				if r, err = sh.sync(ctx); err != nil {
					break // cannot check the fleet's counts: stay as we are
				}
			}
			sh.apply(m.Payload, r.calls, r.fails, r.trusted)
			armClaim()
		case <-sh.changed:
			sh.reconcile(ctx)
			armClaim()
		case until := <-claimAt:
			if !until.Equal(claimed) {
				claimed = until
				sh.claimRound(ctx, until)
			}
			armClaim()
		case <-tick.C:
			sh.reconcile(ctx)
			r, err := sh.sync(ctx)
			if err != nil {
				break
			}
			if r.state != "" && r.state != sh.seen {
				sh.apply(r.state, r.calls, r.fails, r.trusted) // a change whose message this instance missed
			}
			if r.trusted && sh.b.State() == breaker.StateClosed && sh.b.Override() == breaker.OverrideNone && sh.trips(r.calls, r.fails) {
				if until := bridge.BreakerTrip(sh.b); !until.IsZero() {
					sh.reconcile(ctx)
				}
			}
			armClaim()
		}
	}
}

// claimScript claims the probe round of the fleet's open stay: the stay
// the state key names (not the caller's own until, which a lost message
// may have left apart from the fleet's); when the state key names none (a
// lost publish, an expired key), the caller's stay (ARGV[2]) is stored
// and named. The probe key holds "<until> <instance>" of the round's
// holder. It returns {won, until of the round} ({0, ”} for an operator's
// state).
const claimScript = `
local v = redis.call('GET', KEYS[1])
if v and (string.sub(v, 1, 7) == 'forced ' or string.sub(v, 1, 9) == 'disabled ') then return {0, ''} end
local u = v and string.match(v, '^open (%d+) ')
if not u then
  u = ARGV[2]
  local msg = 'open ' .. u .. ' ' .. ARGV[1]
  redis.call('SET', KEYS[1], msg, 'PX', ARGV[3])
  redis.call('PUBLISH', KEYS[3], msg)
end
local p = redis.call('GET', KEYS[2])
if p then
  local pu, pid = string.match(p, '^(%d+) (%S+)$')
  if pu == u then
    if pid == ARGV[1] then return {1, u} end
    return {0, u}
  end
end
redis.call('SET', KEYS[2], u .. ' ' .. ARGV[1], 'PX', ARGV[3])
return {1, u}`

// claimRound claims the probe round of the stay that ends at until: the
// instance that claims it goes half-open when its stay ends; the others
// stay open one more stay past the fleet's until, or until it publishes
// the outcome. Without Redis, the instance probes on its own.
func (sh *Shared) claimRound(ctx context.Context, until time.Time) {
	if !bridge.BreakerOpenUntil(sh.b).Equal(until) {
		return // the stay changed since (closed, extended, forced): no round to claim
	}
	ttl := (time.Until(until) + 2*sh.s.OpenTimeout).Milliseconds()
	keys := []string{sh.stateKey(), sh.probeKey(), sh.channel()}
	type claimed struct {
		won   bool
		until time.Time
	}
	c, err := do(sh, ctx, time.Now().Add(sh.o.Budget), func(ctx context.Context) (claimed, error) {
		v, err := sh.o.Client.Eval(ctx, claimScript, keys, sh.id, strconv.FormatInt(sh.toServer(until), 10), max(ttl, 1)).Slice()
		if err != nil || len(v) != 2 {
			return claimed{}, err
		}
		won, _ := v[0].(int64)
		us, _ := v[1].(string)
		ns, perr := strconv.ParseInt(us, 10, 64)
		if perr != nil {
			return claimed{won: won == 1}, nil
		}
		return claimed{won == 1, sh.fromServer(ns)}, nil
	})
	if err != nil || c.won {
		sh.owesClose = true // its probes decide the round: a close is published
		return
	}
	if c.until.IsZero() {
		return
	}
	if !bridge.BreakerOpenUntil(sh.b).Equal(until) {
		return // closed, or extended, during the claim
	}
	bridge.BreakerOpenRemote(sh.b, later(c.until, until).Add(sh.s.OpenTimeout))
	sh.toldOpens = sh.b.Counts().Opens // late (it had gone half-open): not a change to publish
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
