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

// Group shares the breakers of a keyed set (one per host, per method, per
// tenant: an adapter's PerHost, PerMethod or PerKey) through one goroutine,
// one subscription and one pipeline per sync, however many keys it holds:
//
//   - a key with activity (calls since the last sync, a state other than
//     closed, a change not yet told) is in that sync's pipeline, one
//     command for it; a key without any costs no Redis operation, and no
//     memory but its breaker's and its entry's (under 1.5 KiB, measured by
//     BenchmarkFleet);
//   - trips, closes and probe rounds travel per key over one pattern
//     subscription (PSUBSCRIBE), as a lone Share's do over its channel;
//   - a key's sharing ends when its breaker's chain is evicted from an
//     adapter's keyed set (or at Shared.Close): nothing is kept for it.
//
// Key k of group Name shares the breaker named "Name/k" (keys
// "callguard:breaker:{Name/k}:…", one Cluster slot per key). Every
// instance of a service makes one Group per keyed set, with the same
// Name, and shares each key's breaker as its chain is built:
//
//	g, err := shared.NewGroup(shared.Options{Client: rdb, Name: "hosts"})
//	…
//	defer g.Close()
//	tr, err := httpmw.New(http.DefaultTransport, nil, httpmw.PerHost(func(host string) (*chain.Chain, error) {
//		b, err := breaker.New(settings)
//		if err != nil {
//			return nil, err
//		}
//		if _, err := g.Share(host, b); err != nil {
//			return nil, err
//		}
//		return chain.New(retry, b, attempt)
//	}, 1000))
type Group struct {
	o        Options
	id       string // this instance, in messages and probe rounds
	lone     bool   // made by Share: one breaker, its keys named by Name alone
	degraded atomic.Bool
	offset   atomic.Int64 // the last offset a sync measured: a new key's until it has its own

	cl       *clients            // the sharing's own Redis clients
	reg      metric.Registration // the degraded gauge's callback
	ctx      context.Context     // ended by Close
	stop     context.CancelFunc
	done     chan struct{}
	closeMu  sync.Once
	closeErr error
	started  bool
	scan     []*Shared // the goroutine's: the members a tick looks at
	ticks    uint32    // the goroutine's: ticks so far
	held     bool      // the goroutine's: an operation ran out of its budget since the last tick (see own)
	claims   []event   // the goroutine's: claims held to the next tick

	// One Redis operation at a time: a token in slot while it runs, held
	// until it returns (at once when its caller stops waiting: its
	// connections are closed then).
	slot   chan struct{}
	opsMu  sync.Mutex // guards closed and the Add of ops
	closed bool
	ops    sync.WaitGroup

	mu      sync.Mutex         // guards members and events
	members map[string]*Shared // by key ("" for a lone Share's)
	events  []event            // for the goroutine: at most three per member (see event)
	wake    chan struct{}      // events to look at (coalesced)
}

// An event is what the group's goroutine is told of a member: a change of
// its breaker's state (at most one queued: Shared.dirty), the time to
// claim a probe round (one armed at a time), a new member's first read, or
// its removal.
type event struct {
	m     *Shared
	kind  eventKind
	until time.Time // evClaim: the stay whose round to claim
}

type eventKind uint8

const (
	evChanged eventKind = iota
	evClaim
	evNew
	evRemove
)

// NewGroup returns a group that shares the breakers of a keyed set under
// o.Name (see Group), until Close. It subscribes at once (within the
// budget; go-redis subscribes when Redis answers, if it does not now).
func NewGroup(o Options) (*Group, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if strings.ContainsAny(o.Name, `*?[]\/`) {
		return nil, fmt.Errorf(`shared: Options.Name = %q: a group's name has no *, ?, [, ], \ or /`, o.Name)
	}
	g, err := newGroup(o, false)
	if err != nil {
		return nil, err
	}
	if err := g.register(); err != nil {
		g.cl.close()
		return nil, err
	}
	g.start(nil)
	return g, nil
}

func (o *Options) check() error {
	switch {
	case o.Client == nil:
		return errors.New("shared: Options.Client is nil")
	case o.Name == "" || strings.ContainsAny(o.Name, "{} "):
		return fmt.Errorf("shared: Options.Name = %q: must be set, without braces or spaces", o.Name)
	case o.Budget < 0:
		return fmt.Errorf("shared: Options.Budget = %v: must be >= 0 (0: 50ms)", o.Budget)
	case o.Sync < 0:
		return fmt.Errorf("shared: Options.Sync = %v: must be >= 0 (0: 100ms)", o.Sync)
	}
	switch o.Client.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		return fmt.Errorf("shared: Options.Client is a %T: want a *redis.Client (a failover client is one) or a *redis.ClusterClient (the sharing makes its own connections with its options)", o.Client)
	}
	if o.Budget == 0 {
		o.Budget = 50 * time.Millisecond
	}
	if o.Sync == 0 {
		o.Sync = 100 * time.Millisecond
	}
	return nil
}

func newGroup(o Options, lone bool) (*Group, error) {
	cl, err := newClients(o)
	if err != nil {
		return nil, err
	}
	var idBytes [8]byte
	_, _ = rand.Read(idBytes[:])
	g := &Group{o: o, lone: lone, id: hex.EncodeToString(idBytes[:]), cl: cl,
		done:    make(chan struct{}),
		slot:    make(chan struct{}, 1),
		members: make(map[string]*Shared),
		wake:    make(chan struct{}, 1),
	}
	g.ctx, g.stop = context.WithCancel(context.Background())
	return g, nil
}

// register adds the degraded gauge (with Options.Metrics).
func (g *Group) register() error {
	if g.o.Metrics == nil {
		return nil
	}
	m := g.o.Metrics.Meter("github.com/callguard/callguard")
	gauge, err := m.Int64ObservableGauge("callguard.shared.degraded",
		metric.WithDescription("1 while a shared breaker's Redis does not answer (the breaker is on its own), 0 otherwise."))
	if err != nil {
		return fmt.Errorf("shared: Options.Metrics: %w", err)
	}
	name := metric.WithAttributes(attribute.String("callguard.breaker.name", g.o.Name))
	reg, err := m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		v := int64(0)
		if g.Degraded() {
			v = 1
		}
		ob.ObserveInt64(gauge, v, name)
		return nil
	}, gauge)
	if err != nil {
		return fmt.Errorf("shared: Options.Metrics: %w", err)
	}
	g.reg = reg
	return nil
}

// channelPrefix and channelSuffix frame a member's channel: the key is
// between them.
func (g *Group) channelPrefix() string {
	if g.lone {
		return "callguard:breaker:{" + g.o.Name
	}
	return "callguard:breaker:{" + g.o.Name + "/"
}

const channelSuffix = "}:changes"

// start subscribes (within one budget) and starts the goroutine; with
// first (a lone Share's breaker), its state is read in the same budget
// before.
func (g *Group) start(first *Shared) {
	deadline := time.Now().Add(g.o.Budget)
	sub := g.cl.sub.Subscribe(g.ctx)
	_, _ = doOn(g, g.cl.subConns, g.ctx, deadline, func(ctx context.Context) (struct{}, error) {
		if g.lone {
			return struct{}{}, sub.Subscribe(ctx, first.channel())
		}
		return struct{}{}, sub.PSubscribe(ctx, g.channelPrefix()+"*"+channelSuffix)
	})
	if first != nil {
		if rs, err := g.syncUntil(g.ctx, deadline, []*Shared{first}); err == nil && rs[0].state != "" {
			first.apply(rs[0].state, rs[0].calls, rs[0].fails, rs[0].trusted)
		}
	}
	g.started = true
	go g.run(sub)
}

// Share shares b, a breaker made by breaker.New with the native engine,
// as the group's key key, until Close or until its chain is evicted from
// an adapter's keyed set. It does not wait on Redis: the key's state is
// read by the group's next operation, and calls before it see b alone.
// A key is shared once at a time: sharing it again ends the first
// sharing. The key has no braces.
func (g *Group) Share(key string, b *breaker.Breaker) (*Shared, error) {
	if g.lone {
		return nil, errors.New("shared: Share on the group of a lone shared breaker")
	}
	if strings.ContainsAny(key, "{}") {
		return nil, fmt.Errorf("shared: Group.Share(%q, …): a key has no braces", key)
	}
	m, err := newMember(g, key, b)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	if g.ending() {
		g.mu.Unlock()
		m.finish()
		return nil, ErrClosed
	}
	old := g.members[key]
	g.members[key] = m
	if old != nil {
		old.unwatch()
		g.events = append(g.events, event{m: old, kind: evRemove})
	}
	g.events = append(g.events, event{m: m, kind: evNew})
	g.mu.Unlock()
	g.notify()
	return m, nil
}

// ending reports whether Close began.
func (g *Group) ending() bool { return g.ctx.Err() != nil }

// post queues an event for the goroutine.
func (g *Group) post(e event) {
	g.mu.Lock()
	g.events = append(g.events, e)
	g.mu.Unlock()
	g.notify()
}

func (g *Group) notify() {
	select {
	case g.wake <- struct{}{}:
	default: // a look is due already
	}
}

// Close ends the sharing of every key: their breakers go on alone. It
// does not wait on Redis: it closes the sharing's connections, so that an
// operation in flight (and the subscription) ends at once, and waits for
// that, and for the group's goroutine to end (and for a hook of
// Options.Instrument's that is running: its time is its own).
func (g *Group) Close() error {
	g.closeMu.Do(func() {
		g.stop()
		g.cl.closeConns()
		if g.started {
			<-g.done
		}
		g.opsMu.Lock()
		g.closed = true
		g.opsMu.Unlock()
		g.ops.Wait()
		g.cl.close()
		g.mu.Lock()
		ms := g.members
		g.members = map[string]*Shared{}
		g.events = nil
		g.mu.Unlock()
		for _, m := range ms {
			m.unwatch()
			m.finish()
		}
		if g.reg != nil {
			g.closeErr = g.reg.Unregister()
		}
	})
	return g.closeErr
}

// Degraded reports whether Redis failed to answer in time at the last
// operation: the group's breakers are on their own until it answers again.
func (g *Group) Degraded() bool { return g.degraded.Load() }

// Len is the number of keys shared.
func (g *Group) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.members)
}

// ErrClosed is returned by ForceOpen, Disable and Reset after Close: the
// local breaker changed, the fleet was not told.
var ErrClosed = errors.New("shared: closed")

// ErrBudget is the error OnDegraded gets when Redis did not answer within
// the budget (Options.Budget), or had not yet answered the operation
// before (one operation at a time).
var ErrBudget = errors.New("shared: Redis did not answer within the budget")

// syncScript adds a key's calls and failures since the last sync to the
// current second's buckets (KEYS[2], KEYS[3]; ARGV: the counts and the
// buckets' expiry in seconds), and returns the fleet's calls and failures
// over the window (KEYS[4…], calls and failures by second), the state key
// (KEYS[1]) and the TIME of the node that holds them: one command per key
// and sync.
const syncScript = `
if tonumber(ARGV[1]) > 0 then redis.call('INCRBY', KEYS[2], ARGV[1]); redis.call('EXPIRE', KEYS[2], ARGV[3]) end
if tonumber(ARGV[2]) > 0 then redis.call('INCRBY', KEYS[3], ARGV[2]); redis.call('EXPIRE', KEYS[3], ARGV[3]) end
local c, f = 0, 0
for i = 4, #KEYS, 2 do
  c = c + (tonumber(redis.call('GET', KEYS[i])) or 0)
  f = f + (tonumber(redis.call('GET', KEYS[i + 1])) or 0)
end
local t = redis.call('TIME')
return {c, f, redis.call('GET', KEYS[1]) or '', t[1], t[2]}`

// syncResult is what a sync reads back for a key: the fleet's counts over
// the window, the state key, and whether the counts can be trusted to trip
// on (see syncUntil).
type syncResult struct {
	calls, fails uint64
	state        string
	trusted      bool
}

// sync is syncUntil within one budget.
func (g *Group) sync(ctx context.Context, ms []*Shared) ([]syncResult, error) {
	return g.syncUntil(ctx, time.Now().Add(g.o.Budget), ms)
}

// syncUntil adds each member's calls and failures since its last sync to
// the current second's buckets, and returns the fleet's over the window
// and the state key, all in one pipeline. What could not be added (Redis
// down) is dropped: an outage's worth of one instance's counts, added at
// once when Redis answers again, would trip the fleet on a view of its
// own. A member's counts are not trusted when its breaker closed while the
// sync was in flight, or when a close of this instance is not yet
// published (the window not yet cleared): they are the outage's, and
// would re-open the fleet on a healthy downstream.
func (g *Group) syncUntil(ctx context.Context, deadline time.Time, ms []*Shared) ([]syncResult, error) {
	// What the operation's goroutine reads is prepared here, and only
	// that: the members are this goroutine's. A sync held (see own) drops
	// its counts as a failed one does.
	type prepared struct {
		keys     []string
		dc, df   uint64
		ttl      int64
		stBefore breaker.State
		opens    uint64
	}
	ps := make([]prepared, len(ms))
	for i, m := range ms {
		c := m.b.Counts()
		nowCalls, nowFails := c.Successes+c.Failures+c.SlowUnanswered, c.Failures
		p := prepared{dc: nowCalls - m.sent.calls, df: nowFails - m.sent.fails, ttl: m.window() + 2, stBefore: m.b.State(), opens: c.Opens}
		m.sent.calls, m.sent.fails = nowCalls, nowFails
		sec := m.serverSec()
		ck, fk := m.bucketKeys(sec)
		p.keys = append(append(make([]string, 0, 3+2*p.ttl), m.stateKey(), ck, fk), m.windowKeys(sec)...)
		ps[i] = p
	}
	type answer struct {
		vs  [][]any
		mid time.Time // Redis read its clock between the send and the answer
	}
	a, err := own(g, ctx, deadline, func(ctx context.Context) (answer, error) {
		pipe := g.cl.ops.Pipeline()
		cmds := make([]*redis.Cmd, len(ps))
		for i, p := range ps {
			cmds[i] = pipe.Eval(ctx, syncScript, p.keys, p.dc, p.df, p.ttl)
		}
		sent := time.Now()
		if _, err := pipe.Exec(ctx); err != nil {
			return answer{}, err
		}
		a := answer{vs: make([][]any, len(cmds)), mid: sent.Add(time.Since(sent) / 2)}
		for i, c := range cmds {
			v, err := c.Slice()
			if err != nil || len(v) != 5 {
				return answer{}, fmt.Errorf("shared: sync of %s: %v %v", ps[i].keys[0], v, err)
			}
			a.vs[i] = v
		}
		return a, nil
	})
	if err != nil {
		return nil, err
	}
	rs := make([]syncResult, len(ms))
	for i, m := range ms {
		v := a.vs[i]
		c, _ := v[0].(int64)
		f, _ := v[1].(int64)
		st, _ := v[2].(string)
		rs[i] = syncResult{calls: uint64(max(c, 0)), fails: uint64(max(f, 0)), state: st}
		if server, ok := redisTime(v[3], v[4]); ok {
			// Within half the round trip of Redis's clock.
			off := server.UnixNano() - a.mid.Add(m.skew()).UnixNano()
			m.offset.Store(off)
			g.offset.Store(off)
		}
	}
	for i, m := range ms {
		rs[i].trusted = !m.owesClose && ps[i].stBefore == breaker.StateClosed &&
			m.b.State() == breaker.StateClosed && m.b.Counts().Opens == ps[i].opens
	}
	return rs, nil
}

// redisTime reads TIME's seconds and microseconds.
func redisTime(secs, usecs any) (time.Time, bool) {
	s1, ok1 := secs.(string)
	s2, ok2 := usecs.(string)
	sec, err1 := strconv.ParseInt(s1, 10, 64)
	usec, err2 := strconv.ParseInt(s2, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return time.Time{}, false
	}
	return time.Unix(sec, usec*1000), true
}

// run is the group's goroutine. When it ends (Close, or a lone Share's
// breaker evicted from a keyed set), the sharing's connections and
// clients are closed: nothing of it is left waiting on Redis.
func (g *Group) run(sub *redis.PubSub) {
	defer close(g.done)
	defer func() {
		g.cl.closeConns() // first: the subscription's lock may be held by a reconnect waiting on Redis
		_ = sub.Close()
		g.cl.close()
	}()
	ctx := g.ctx
	msgs := sub.Channel()
	tick := time.NewTicker(g.o.Sync)
	defer tick.Stop()
	defer func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, m := range g.members {
			m.stopClaim()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-msgs:
			if !ok {
				return
			}
			g.onMessages(ctx, msg, msgs)
		case <-g.wake:
			g.onEvents(ctx)
		case <-tick.C:
			g.onTick(ctx)
		}
	}
}

// member returns the member a channel's message is for (nil: none here).
func (g *Group) member(channel string) *Shared {
	key, ok := strings.CutPrefix(channel, g.channelPrefix())
	if !ok {
		return nil
	}
	if key, ok = strings.CutSuffix(key, channelSuffix); !ok {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.members[key]
}

// onMessages applies msg and the messages queued behind it (up to a
// pipeline's worth): an open for a closed breaker is checked against the
// fleet's counts, read for all such keys in one sync.
func (g *Group) onMessages(ctx context.Context, msg *redis.Message, msgs <-chan *redis.Message) {
	type pending struct {
		m       *Shared
		payload string
	}
	var check []pending
	for n := 0; msg != nil; n++ {
		if m := g.member(msg.Channel); m != nil && msg.Payload != m.seen && !m.gone {
			if strings.HasPrefix(msg.Payload, "open ") && m.b.State() == breaker.StateClosed {
				check = append(check, pending{m, msg.Payload})
			} else {
				m.apply(msg.Payload, 0, 0, false)
				m.armClaim()
			}
		}
		msg = nil
		if n < maxBatch {
			select {
			case msg = <-msgs:
			default:
			}
		}
	}
	if len(check) == 0 {
		return
	}
	ms := make([]*Shared, len(check))
	for i, p := range check {
		ms[i] = p.m
	}
	rs, err := g.sync(ctx, ms)
	if err != nil {
		return // cannot check the fleet's counts: stay as we are
	}
	for i, p := range check {
		p.m.apply(p.payload, rs[i].calls, rs[i].fails, rs[i].trusted)
		p.m.armClaim()
	}
}

// maxBatch bounds the messages applied, and so the keys synced, at once.
const maxBatch = 1024

// onEvents handles the members' events: changes told, rounds claimed, new
// members' first reads (one sync), removals.
func (g *Group) onEvents(ctx context.Context) {
	g.mu.Lock()
	es := g.events
	g.events = nil
	g.mu.Unlock()
	var fresh []*Shared
	for _, e := range es {
		m := e.m
		switch {
		case e.kind == evRemove:
			m.stopClaim()
			m.gone = true
			m.finish()
		case m.gone:
		case e.kind == evChanged:
			m.dirty.Store(false)
			m.reconcile(ctx)
			m.armClaim()
		case e.kind == evClaim:
			g.claim(ctx, e)
		case e.kind == evNew:
			fresh = append(fresh, m)
		}
	}
	for len(fresh) > 0 {
		n := min(len(fresh), maxBatch)
		if rs, err := g.sync(ctx, fresh[:n]); err == nil {
			for i, m := range fresh[:n] {
				if rs[i].state != "" {
					m.apply(rs[i].state, rs[i].calls, rs[i].fails, rs[i].trusted)
				}
				m.armClaim()
			}
		}
		fresh = fresh[n:]
	}
}

// claim claims a member's probe round. Held by an operation that ran out
// of its budget (see own), it is kept for the next tick, where claims come
// first: a sync later, within the claim's lead on the stay's end (a sync
// and two budgets), rather than given up (the instance would then probe
// on its own). With no time left for that, it is tried at once, held or
// not: one operation, within its budget.
func (g *Group) claim(ctx context.Context, e event) {
	m := e.m
	held := g.held
	if held && time.Until(e.until) > g.o.Sync+g.o.Budget {
		g.claims = append(g.claims, e)
		return
	}
	if !e.until.Equal(m.claimed) {
		m.claimed = e.until
		g.held = false
		m.claimRound(ctx, e.until)
		g.held = g.held || held
	}
	m.armClaim()
}

// onTick tells the fleet what it was not told, and syncs the members with
// activity: counts out, the fleet's counts and state in; a member whose
// fleet counts meet its rule trips.
func (g *Group) onTick(ctx context.Context) {
	g.ticks++
	g.held = false
	if len(g.claims) > 0 {
		claims := g.claims
		g.claims = nil
		for _, e := range claims {
			if !e.m.gone {
				g.claim(ctx, e)
			}
		}
	}
	g.mu.Lock()
	g.scan = g.scan[:0]
	for _, m := range g.members {
		g.scan = append(g.scan, m)
	}
	g.mu.Unlock()
	active := g.scan[:0] // in place: the scan's members are looked at in order
	for _, m := range g.scan {
		if m.active() {
			active = append(active, m)
		}
	}
	clear(g.scan[len(active):]) // no member kept past its removal
	for len(active) > 0 {
		n := min(len(active), maxBatch)
		batch := active[:n]
		active = active[n:]
		for _, m := range batch {
			m.reconcile(ctx)
		}
		rs, err := g.sync(ctx, batch)
		if err != nil {
			return
		}
		for i, m := range batch {
			m.syncedAt = g.ticks
			m.onSync(ctx, rs[i])
		}
	}
}

// Retirement: a keyed set that evicts a chain ends its breakers' sharing.
var sharedBreakers sync.Map // *breaker.Breaker → *Shared

func init() {
	bridge.BreakerRetired = func(b any) {
		if v, ok := sharedBreakers.Load(b); ok {
			v.(*Shared).retire()
		}
	}
}
