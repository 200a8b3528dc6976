// Package shared shares a breaker's state among the instances of a
// service through Redis, so that a fleet learns an outage once instead of
// once per instance, and probes a recovering downstream with the
// configured number of probes, not that many per instance.
//
// A call never waits on Redis: the breaker runs where it always did, in
// the caller's process, lock-free; a goroutine carries its changes out
// and the others' in — one per shared breaker (Share starts it, Close
// ends it), or one for all the breakers of a keyed set (a Group: one
// pipeline per sync for the keys with activity, one pattern subscription,
// a key's sharing ended when an adapter's keyed set evicts its chain):
//
//   - a trip: the instance whose breaker opens writes the state key (the
//     open-until time) and publishes it; every other instance opens until
//     the same time, if the fleet's counts support it (below);
//   - counts: every Sync (100 ms), each instance adds its calls and
//     failures since the last sync to per-second buckets in Redis and reads
//     the fleet's window back (one script per breaker, all of them in one
//     pipeline); when the fleet's failure rate trips the
//     breaker's rule, every instance opens on its own reading of the same
//     counts;
//   - half-open: when the open stay ends, one instance claims the probe
//     round (named by the open-until the state key holds: the first open
//     stored names the stay, whatever messages were lost) and goes
//     half-open with the breaker's probes; the others stay open, one more
//     stay at most, until that instance publishes the outcome: closed
//     (they close) or open again (they follow). So the fleet sends
//     HalfOpenProbes probes per round, not HalfOpenProbes per instance;
//   - Redis down or slow: every operation ends within its deadline
//     (Budget, 50 ms), whatever the client's options: it runs on
//     connections of the sharing's own, closed at the deadline if it is
//     still running, one operation at a time; after one runs out of time
//     the sharing goroutine makes no other until its next sync. When one
//     fails the instance goes on with its local breaker alone, says so
//     (Options.OnDegraded, Shared.Degraded), and reads the state back when
//     Redis answers again. Close does not wait on Redis (it closes those
//     connections). The state key outlives instances: a restarted
//     instance reads it at Share.
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
	"go.opentelemetry.io/otel/metric"
)

// Options configure a shared breaker.
type Options struct {
	// Client is the Redis client: a *redis.Client (a failover client is
	// one) or a *redis.ClusterClient. The sharing does not run its
	// operations on it: it makes two clients of its own with its options
	// (address, dialer, credentials, TLS, database: one for its
	// operations, one for its subscription), whose timeouts are the
	// budget's whatever Client's (see Budget); so Client's hooks do not see
	// them (see Instrument). Client itself is never closed nor changed.
	Client redis.UniversalClient
	// Name names the breaker in Redis: instances that share a breaker use
	// the same Name (keys "callguard:breaker:{Name}:…"). A Group's names
	// its keyed set: key k shares the breaker "Name/k".
	Name string
	// Budget bounds every Redis operation (default 50 ms), whatever
	// Client's options: at it, the operation's connections are closed (it
	// ends at once, its answer dropped) and the instance goes on alone
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
	// Instrument, if set, is called with each of the sharing's own clients
	// as it is made (at Share or NewGroup), to add hooks (tracing,
	// metrics: redisotel.InstrumentTracing) that see its commands; its
	// error fails Share or NewGroup. It must not run commands. A hook's
	// own time is not bounded by the budget (Close waits for a hook that
	// is running).
	Instrument func(redis.UniversalClient) error

	skew    time.Duration                             // this instance's clock's error (tests only: export_test.go)
	observe func(took, late time.Duration, err error) // told when an operation returns (tests only: export_test.go)
}

// Shared is a breaker shared through Redis: alone (Share) or as a key of
// a Group. Its methods are safe for concurrent use.
type Shared struct {
	g      *Group
	key    string           // its group's key ("" alone)
	b      *breaker.Breaker // its Settings are read where needed (not kept: a copy per key)
	prefix string           // its Redis keys' prefix

	unwatchFn func()      // removes the receiver of the breaker's changes
	unwatched sync.Once   // unwatchFn called
	dirty     atomic.Bool // a change event queued for the group's goroutine
	retired   sync.Once   // Close or retire began
	done      chan struct{}
	finished  sync.Once

	// The group's goroutine's own (and Share's, before it starts):
	sent      struct{ calls, fails uint64 } // counts already added to Redis
	seen      string                        // the last state message applied or published
	toldOpens uint64                        // the breaker's Opens when its open state was last told or applied
	owesClose bool                          // the fleet may hold this instance open (it published or followed an open, or probes): a close must be published
	gone      bool                          // removed from the group: its events are dropped
	claim     *time.Timer                   // armed to claim the probe round of the stay armed
	armed     time.Time                     // the stay a claim is set for
	claimed   time.Time                     // the last stay claimed (or lost)
	syncedAt  uint32                        // the group's tick of the key's last sync

	// Times cross instances in Redis's clock, not this machine's: offset
	// is Redis's TIME minus this instance's wall clock (ns), measured at
	// every sync of the key.
	offset atomic.Int64
}

// skew shifts this instance's wall clock (tests only: a machine whose
// clock is off).
func (sh *Shared) skew() time.Duration { return sh.g.o.skew }

// toServer is t (this process's time) in Redis's clock, as Unix ns.
func (sh *Shared) toServer(t time.Time) int64 {
	return t.Add(sh.skew()).UnixNano() + sh.offset.Load()
}

// fromServer is a Unix ns time in Redis's clock in this process's.
func (sh *Shared) fromServer(ns int64) time.Time {
	return time.Unix(0, ns-sh.offset.Load()).Add(-sh.skew())
}

// serverSec is Redis's second now: the counts' buckets are named by it.
func (sh *Shared) serverSec() int64 { return sh.toServer(time.Now()) / int64(time.Second) }

// Share shares b, a breaker made by breaker.New with the native engine,
// through Redis, until Close. It reads the fleet's state first (within the
// budget): an instance that starts while the fleet's breaker is open (and
// the fleet's counts support it) starts open. A breaker is shared by one
// Shared at a time. For the breakers of a keyed set, one per key, use a
// Group: one goroutine and one pipeline for all of them.
func Share(b *breaker.Breaker, o Options) (*Shared, error) {
	if b == nil {
		return nil, errors.New("shared: Share(nil, …): needs a breaker")
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	g, err := newGroup(o, true)
	if err != nil {
		return nil, err
	}
	sh, err := newMember(g, "", b)
	if err != nil {
		g.cl.close()
		return nil, err
	}
	if err := g.register(); err != nil {
		sh.finish()
		g.cl.close()
		return nil, err
	}
	g.members[""] = sh
	g.start(sh)
	return sh, nil
}

// newMember makes b the member key of g, watching its changes.
func newMember(g *Group, key string, b *breaker.Breaker) (*Shared, error) {
	if b == nil {
		return nil, fmt.Errorf("shared: Group.Share(%q, nil): needs a breaker", key)
	}
	if b.Settings().Engine != breaker.EngineNative {
		return nil, errors.New("shared: the breaker must use breaker.EngineNative (its state is moved by other instances)")
	}
	name := g.o.Name
	if !g.lone {
		name += "/" + key
	}
	sh := &Shared{g: g, key: key, b: b, prefix: "callguard:breaker:{" + name + "}:", done: make(chan struct{})}
	if _, dup := sharedBreakers.LoadOrStore(b, sh); dup {
		return nil, fmt.Errorf("shared: the breaker of %q is shared already (Close that first)", name)
	}
	sh.offset.Store(g.offset.Load())
	c := b.Counts()
	sh.sent.calls, sh.sent.fails = c.Successes+c.Failures+c.SlowUnanswered, c.Failures
	sh.toldOpens = c.Opens
	sh.unwatchFn = bridge.BreakerWatch(b, "", func(breaker.StateChange) {
		if !sh.dirty.Swap(true) {
			g.post(event{m: sh, kind: evChanged})
		}
	})
	return sh, nil
}

func (sh *Shared) unwatch() { sh.unwatched.Do(sh.unwatchFn) }

// finish ends the member: Close returns, the breaker may be shared again.
func (sh *Shared) finish() {
	sh.finished.Do(func() {
		sh.unwatch()
		sharedBreakers.CompareAndDelete(sh.b, sh)
		close(sh.done)
	})
}

// Close stops sharing: the breaker goes on alone. It does not wait on
// Redis. Alone (Share), it closes the sharing's connections, so that a
// Redis operation in flight ends at once, and waits for that and for the
// sharing goroutine to end (see Group.Close). A group's key is removed at
// the group's goroutine's next look: after the operation in flight, if
// any, within the budget. After Close, ForceOpen, Disable and Reset change
// the local breaker only, and return ErrClosed.
func (sh *Shared) Close() error {
	if sh.g.lone {
		return sh.g.Close()
	}
	sh.retire()
	select {
	case <-sh.done:
	case <-sh.g.done:
	}
	return nil
}

// retire removes a group's key, without waiting.
func (sh *Shared) retire() {
	if sh.g.lone {
		// A lone Share's breaker evicted from a keyed set: its goroutine
		// is told to end, not waited for (the evicting call does not wait
		// on Redis); Close still waits for it.
		sh.retired.Do(func() {
			sh.unwatch()
			sh.g.stop()
		})
		return
	}
	sh.retired.Do(func() {
		sh.unwatch()
		g := sh.g
		g.mu.Lock()
		if g.members[sh.key] == sh {
			delete(g.members, sh.key)
		}
		g.events = append(g.events, event{m: sh, kind: evRemove})
		g.mu.Unlock()
		g.notify()
	})
}

// Degraded reports whether Redis failed to answer in time at the last
// operation: the breaker is on its own until it answers again.
func (sh *Shared) Degraded() bool { return sh.g.Degraded() }

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
	w := sh.b.Settings().Window
	if w <= 0 {
		w = breaker.DefaultWindow
	}
	return max(int64((w+time.Second-1)/time.Second), 1)
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
	return own(sh.g, ctx, time.Now().Add(sh.g.o.Budget), func(ctx context.Context) (string, error) {
		return sh.g.cl.ops.Eval(ctx, naturalScript, keys, msg, max(ttl, time.Millisecond).Milliseconds(), now, sh.g.id).Text()
	})
}

// openMsg is the state of a stay open until until: in Redis's clock.
func (sh *Shared) openMsg(until time.Time) string {
	return "open " + strconv.FormatInt(sh.toServer(until), 10) + " " + sh.g.id
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
	msg := verb + " " + sh.g.id
	return sh.g.op(ctx, func(ctx context.Context) error {
		p := sh.g.cl.ops.TxPipeline()
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
	if len(f) < 2 || f[len(f)-1] == sh.g.id {
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
	s := sh.b.Settings()
	if s.FailureRate > 0 {
		return calls >= uint64(max(s.MinCalls, 1)) && float64(fails) >= s.FailureRate*float64(calls)
	}
	return s.ConsecutiveFailures > 0 && fails >= uint64(s.ConsecutiveFailures) && 2*fails >= calls
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
		stored, err := sh.publishNatural(ctx, msg, time.Until(until)+sh.b.Settings().OpenTimeout, false)
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
		msg := "closed " + sh.g.id
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

// active reports whether the member has anything to sync: calls since
// the last sync, a state other than closed, an open or close not yet
// told, an operator's state. A lone Share's breaker syncs at every tick
// (it reads the state key for a message it missed even when idle).
func (sh *Shared) active() bool {
	if sh.g.lone {
		return true
	}
	c := sh.b.Counts()
	called, told := c.Successes+c.Failures+c.SlowUnanswered != sh.sent.calls, c.Opens == sh.toldOpens
	switch st := sh.b.State(); {
	case called || !told || sh.b.Override() != breaker.OverrideNone:
		return true
	case st == breaker.StateOpen:
		// An open stay told, and no calls: its state key is read once a
		// second (a close whose message was lost), not at every sync.
		return sh.g.ticks-sh.syncedAt >= quietOpenTicks
	default:
		return st != breaker.StateClosed || sh.owesClose
	}
}

// quietOpenTicks is how many syncs apart a quiet open key is read.
const quietOpenTicks = 10

// onSync applies what a sync read: a state whose message this instance
// missed, and a trip when the fleet's counts meet the rule.
func (sh *Shared) onSync(ctx context.Context, r syncResult) {
	if r.state != "" && r.state != sh.seen {
		sh.apply(r.state, r.calls, r.fails, r.trusted)
	}
	if r.trusted && sh.b.State() == breaker.StateClosed && sh.b.Override() == breaker.OverrideNone && sh.trips(r.calls, r.fails) {
		if until := bridge.BreakerTrip(sh.b); !until.IsZero() {
			sh.reconcile(ctx)
		}
	}
	sh.armClaim()
}

// armClaim sets the claim of the probe round of the breaker's open stay:
// ahead of the stay's end by a sync and two operations, so that the claim
// is settled before a caller can take the breaker half-open.
func (sh *Shared) armClaim() {
	until := bridge.BreakerOpenUntil(sh.b)
	if until.IsZero() || until.Equal(sh.claimed) || until.Equal(sh.armed) {
		return
	}
	sh.stopClaim()
	sh.armed = until
	g := sh.g
	sh.claim = time.AfterFunc(max(time.Until(until)-g.o.Sync-2*g.o.Budget, 0), func() {
		g.post(event{m: sh, kind: evClaim, until: until})
	})
}

func (sh *Shared) stopClaim() {
	if sh.claim != nil {
		sh.claim.Stop()
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
	ttl := (time.Until(until) + 2*sh.b.Settings().OpenTimeout).Milliseconds()
	keys := []string{sh.stateKey(), sh.probeKey(), sh.channel()}
	type claimed struct {
		won   bool
		until time.Time
	}
	c, err := own(sh.g, ctx, time.Now().Add(sh.g.o.Budget), func(ctx context.Context) (claimed, error) {
		v, err := sh.g.cl.ops.Eval(ctx, claimScript, keys, sh.g.id, strconv.FormatInt(sh.toServer(until), 10), max(ttl, 1)).Slice()
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
	bridge.BreakerOpenRemote(sh.b, later(c.until, until).Add(sh.b.Settings().OpenTimeout))
	sh.toldOpens = sh.b.Counts().Opens // late (it had gone half-open): not a change to publish
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
