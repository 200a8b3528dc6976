package breaker

import (
	"sync"
	"sync/atomic"
	"time"
)

// StateChange is one transition of a breaker, as the receivers of an
// adapter's state changes get it (grpcmw and httpmw's OnStateChange
// options): which breaker, under which key, from and to which state, when.
type StateChange struct {
	Name     string    // the breaker's Settings.Name ("" if unnamed)
	Key      string    // the key of the breaker's chain in a keyed set (per host, method, target or key); "" outside one
	From, To State     // the transition
	At       time.Time // when it happened
}

// notifier delivers state changes to OnStateChange and to the watchers
// added since (keyed sets' receivers), with no breaker lock held, in the
// order they happened. Transitions are queued under the breaker's lock;
// whichever goroutine finds the queue non-empty and nobody draining it
// delivers every queued change in order. A callback that itself causes a
// transition only queues it: the drain loop delivers it next.
type notifier struct {
	fn     func(from, to State)
	name   string
	active atomic.Bool // fn or a watcher is set: transitions are queued

	mu       sync.Mutex
	watchers []watcher // replaced, never modified in place
	q        []transition
	draining bool
}

type watcher struct {
	key string
	fn  func(StateChange)
}

type transition struct {
	from, to State
	at       time.Time
}

// watch adds a receiver of the state changes from now on.
func (n *notifier) watch(key string, fn func(StateChange)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.watchers = append(n.watchers[:len(n.watchers):len(n.watchers)], watcher{key, fn})
	n.active.Store(true)
}

// push queues a transition. Callers may hold the breaker's lock.
func (n *notifier) push(from, to State) {
	if !n.active.Load() {
		return
	}
	at := time.Now()
	n.mu.Lock()
	n.q = append(n.q, transition{from, to, at})
	n.mu.Unlock()
}

// deliver runs queued callbacks. Callers must not hold the breaker's lock.
func (n *notifier) deliver() {
	if !n.active.Load() {
		return
	}
	n.mu.Lock()
	if n.draining || len(n.q) == 0 {
		n.mu.Unlock()
		return
	}
	n.draining = true
	defer func() {
		// Reached normally with n.mu held; after a panicking callback with
		// it released, so the next deliver can go on.
		if r := recover(); r != nil {
			n.mu.Lock()
			n.draining = false
			n.mu.Unlock()
			panic(r)
		}
		n.draining = false
		n.mu.Unlock()
	}()
	for len(n.q) > 0 {
		t := n.q[0]
		n.q = n.q[1:]
		ws := n.watchers
		n.mu.Unlock()
		if n.fn != nil {
			n.fn(t.from, t.to)
		}
		for _, w := range ws {
			w.fn(StateChange{Name: n.name, Key: w.key, From: t.from, To: t.to, At: t.at})
		}
		n.mu.Lock()
	}
	n.q = nil
}
