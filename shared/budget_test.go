package shared_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/shared"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// budget is the budget of the tests below; closeMargin and opMargin are
// what scheduling may add to it (a loaded machine, -race, a CPU burner
// beside the tests), beyond the scheduler's own lateness in the same run
// (a noise).
const (
	budget      = 50 * time.Millisecond
	closeMargin = 100 * time.Millisecond
	opMargin    = 50 * time.Millisecond
)

// A noise measures the scheduler's lateness while a test runs: a goroutine
// that sleeps 1 ms at a time keeps the longest it overslept. A goroutine
// of the sharing's woken at a deadline can be as late, on the same
// machine at the same time.
type noise struct {
	worst atomic.Int64
	stop  chan struct{}
	done  chan struct{}
}

func startNoise() *noise {
	n := &noise{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(n.done)
		for {
			select {
			case <-n.stop:
				return
			default:
			}
			start := time.Now()
			time.Sleep(time.Millisecond)
			if over := int64(time.Since(start) - time.Millisecond); over > n.worst.Load() {
				n.worst.Store(over)
			}
		}
	}()
	return n
}

// halt stops the measure and returns the worst lateness seen.
func (n *noise) halt() time.Duration {
	close(n.stop)
	<-n.done
	return time.Duration(n.worst.Load())
}

// TestCloseOnHungRedis: a Share, a Group of 32 keys and one key of such a
// Group, on go-redis's default client options (context deadlines ignored
// on socket I/O, 3 s read timeout, 3 retries). The redis-server process
// is stopped (SIGSTOP), then every breaker trips on a failing downstream
// (each trip an operation to make), and Close comes 400 ms later, with an
// operation in flight. Close returns within the budget and a margin, and
// no goroutine of the sharing's (nor of the connections it made) is left.
func TestCloseOnHungRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("real time against redis-server: not in -short")
	}
	for _, tc := range []string{"share", "group", "group-key"} {
		t.Run(tc, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			srv := startRedis(t, "")
			o := shared.Options{Client: defaultClient(t, srv.addr), Name: "cart", Budget: budget}
			var bs []*breaker.Breaker
			var closes []func() error
			var names []string
			if tc == "share" {
				bs = append(bs, must(breaker.New(fleetSettings(nil))))
				sh := must(shared.Share(bs[0], o))
				closes, names = append(closes, sh.Close), append(names, "Shared.Close")
			} else {
				g := must(shared.NewGroup(o))
				for k := range 32 {
					bs = append(bs, must(breaker.New(fleetSettings(nil))))
					sh := must(g.Share(fmt.Sprintf("k%d", k), bs[k]))
					if tc == "group-key" && k == 0 {
						closes, names = append(closes, sh.Close), append(names, "Shared.Close of a key")
					}
				}
				closes, names = append(closes, g.Close), append(names, "Group.Close")
			}
			var down atomic.Bool
			calls := startCallers(&down, bs...)
			time.Sleep(300 * time.Millisecond)
			srv.stop(t)
			down.Store(true)
			n := startNoise()
			time.Sleep(400 * time.Millisecond)
			took := make([]time.Duration, len(closes))
			for i, c := range closes {
				start := time.Now()
				_ = c()
				took[i] = time.Since(start)
			}
			calls.halt()
			late := n.halt()
			for i, d := range took {
				t.Logf("hung Redis: %s took %v (the scheduler's worst lateness in the run: %v)", names[i], d.Round(time.Microsecond), late.Round(time.Microsecond))
				if d > budget+closeMargin+late {
					t.Errorf("hung Redis: %s took %v, want within the budget, a margin and the scheduler's lateness (%v)", names[i], d, budget+closeMargin+late)
				}
			}
		})
	}
}

// opLog records a sharer's Redis operations and degraded events, by
// phase of the run.
type opLog struct {
	phase atomic.Int32
	mu    sync.Mutex
	ops   map[int32][]time.Duration // how far past its deadline each operation returned
	took  map[int32]time.Duration   // the longest operation, from its call to its return
	down  map[int32]int             // OnDegraded(err) calls
	up    map[int32]int             // OnDegraded(nil) calls
}

func newOpLog() *opLog {
	return &opLog{ops: map[int32][]time.Duration{}, took: map[int32]time.Duration{}, down: map[int32]int{}, up: map[int32]int{}}
}

func (l *opLog) options(o shared.Options) shared.Options {
	o.OnDegraded = func(err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if err != nil {
			l.down[l.phase.Load()]++
		} else {
			l.up[l.phase.Load()]++
		}
	}
	return shared.WithObserver(o, func(took, late time.Duration, _ error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		p := l.phase.Load()
		l.ops[p] = append(l.ops[p], late)
		l.took[p] = max(l.took[p], took)
	})
}

// TestOperationsWithinBudget: a Share and a Group of 8 keys on go-redis's
// default client options, through a loopback proxy, their breakers
// tripping on a failing downstream. Redis hangs (SIGSTOP) for 1.5 s, then
// answers; then every reply comes 0.5 s late for 1.5 s, then on time. No
// Redis operation of the sharing's runs past its budget (and a margin),
// hung or slow; each sharer is degraded at the end of each fault (and
// said so), and says so when Redis answers again.
func TestOperationsWithinBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("real time against redis-server: not in -short")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := startRedis(t, "")
	proxy := startSlowProxy(t, srv.addr)
	defer proxy.close()
	client := defaultClient(t, proxy.addr())
	lone, group := newOpLog(), newOpLog()
	logs := map[string]*opLog{"share": lone, "group": group}
	bs := []*breaker.Breaker{must(breaker.New(fleetSettings(nil)))}
	sh := must(shared.Share(bs[0], lone.options(shared.Options{Client: client, Name: "inventory", Budget: budget})))
	defer sh.Close()
	g := must(shared.NewGroup(group.options(shared.Options{Client: client, Name: "hosts", Budget: budget})))
	defer g.Close()
	for k := range 8 {
		bs = append(bs, must(breaker.New(fleetSettings(nil))))
		must(g.Share(fmt.Sprintf("k%d", k), bs[k+1]))
	}
	var down atomic.Bool
	down.Store(true)
	calls := startCallers(&down, bs...)
	defer calls.halt()
	n := startNoise()
	stopNoise := sync.OnceValue(n.halt)
	defer stopNoise()
	setPhase := func(p int32) {
		for _, l := range logs {
			l.phase.Store(p)
		}
	}
	answered := func(p int32) bool {
		for _, l := range logs {
			l.mu.Lock()
			ok := l.up[p] > 0
			l.mu.Unlock()
			if !ok {
				return false
			}
		}
		return true
	}
	const healthy, hung, hungBack, slow, slowBack = 0, 1, 2, 3, 4
	time.Sleep(300 * time.Millisecond)

	setPhase(hung)
	srv.stop(t)
	time.Sleep(1500 * time.Millisecond)
	if !sh.Degraded() || !g.Degraded() {
		t.Errorf("hung Redis, 1.5 s: degraded %t (Share), %t (Group), want both", sh.Degraded(), g.Degraded())
	}
	setPhase(hungBack)
	srv.cont(t)
	if took, ok := waitUntil(10*time.Second, func() bool { return answered(hungBack) }); !ok {
		t.Errorf("hung Redis back: not every sharer said so within %v", took)
	}

	setPhase(slow)
	proxy.setDelay(500 * time.Millisecond)
	time.Sleep(1500 * time.Millisecond)
	if !sh.Degraded() || !g.Degraded() {
		t.Errorf("slow Redis, 1.5 s: degraded %t (Share), %t (Group), want both", sh.Degraded(), g.Degraded())
	}
	setPhase(slowBack)
	proxy.setDelay(0)
	if took, ok := waitUntil(10*time.Second, func() bool { return answered(slowBack) }); !ok {
		t.Errorf("slow Redis back: not every sharer said so within %v", took)
	}

	late := stopNoise()
	t.Logf("the scheduler's worst lateness in the run: %v", late.Round(time.Microsecond))
	phases := []string{healthy: "healthy", hung: "hung", hungBack: "hung, back", slow: "slow", slowBack: "slow, back"}
	for _, name := range []string{"share", "group"} {
		l := logs[name]
		l.mu.Lock()
		for p, phase := range phases {
			over, latest := 0, time.Duration(0)
			for _, late := range l.ops[int32(p)] {
				if late > 0 {
					over++
				}
				latest = max(latest, late)
			}
			t.Logf("%s, %s: %d operations, %d past the budget, the latest %v past it (longest %v); degraded events %d, answered again %d",
				name, phase, len(l.ops[int32(p)]), over, latest.Round(time.Microsecond), l.took[int32(p)].Round(time.Microsecond), l.down[int32(p)], l.up[int32(p)])
			if latest > opMargin+late {
				t.Errorf("%s, %s: an operation returned %v past its budget, want none past it by more than a margin and the scheduler's lateness (%v)", name, phase, latest, opMargin+late)
			}
		}
		if l.down[hung]+l.down[slow] < 2 {
			t.Errorf("%s: %d degraded events in the two faults, want one in each at least", name, l.down[hung]+l.down[slow])
		}
		l.mu.Unlock()
	}
}

var errInstrument = errors.New("test: instrumenting failed")

// TestOwnClients: the sharing's commands run on clients of its own, made
// after Options.Client's options: a hook of the client passed sees none
// of them, one added by Options.Instrument sees them all. An Instrument
// that fails fails Share (its error wrapped), a client the sharing cannot
// make its own after (a Ring) is refused at Share and NewGroup, and
// nothing of a refused sharing is left.
func TestOwnClients(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := startRedis(t, "")
	user, own := &opCounter{}, &opCounter{}
	c := srv.client(t)
	c.AddHook(user)
	b := must(breaker.New(fleetSettings(nil)))
	sh := must(shared.Share(b, shared.Options{Client: c, Name: "cart", Instrument: instrument(own)}))
	if !waitFor(func() bool { return own.trips.Load() >= 3 }) {
		t.Errorf("Instrument's hook saw %d round trips in 2 s, want the syncs' (10 a second)", own.trips.Load())
	}
	_ = sh.Close()
	if n := user.trips.Load(); n != 0 {
		t.Errorf("the client's own hook saw %d round trips, want none (the sharing runs on its own clients)", n)
	}

	_, err := shared.Share(b, shared.Options{Client: c, Name: "cart", Instrument: func(redis.UniversalClient) error { return errInstrument }})
	if !errors.Is(err, errInstrument) {
		t.Errorf("Share with a failing Instrument: %v, want its error", err)
	}
	if _, err := shared.NewGroup(shared.Options{Client: c, Name: "hosts", Instrument: func(redis.UniversalClient) error { return errInstrument }}); !errors.Is(err, errInstrument) {
		t.Errorf("NewGroup with a failing Instrument: %v, want its error", err)
	}

	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.addr}})
	defer ring.Close()
	if _, err := shared.Share(b, shared.Options{Client: ring, Name: "cart"}); err == nil {
		t.Error("Share on a Ring: no error, want one naming Options.Client")
	}
	if _, err := shared.NewGroup(shared.Options{Client: ring, Name: "hosts"}); err == nil {
		t.Error("NewGroup on a Ring: no error, want one naming Options.Client")
	}
	// The breaker refused above is free to be shared again.
	sh = must(shared.Share(b, shared.Options{Client: c, Name: "cart"}))
	_ = sh.Close()
}
