package breaker

import (
	"sync"
	"sync/atomic"
	"time"
)

// StateChange is one transition of a breaker, as the receivers of an
// adapter's state changes get it (grpcmw and httpmw's OnStateChange
// options): which breaker, under which key, from and to which state, when.
// It is a plain value, copied to each receiver; the zero StateChange
// describes no transition.
type StateChange struct {
	Name     string    // the breaker's Settings.Name ("" if unnamed)
	Key      string    // the key of the breaker's chain in a keyed set (per host, method, target or key); "" outside one
	From, To State     // the transition
	At       time.Time // when it happened
}

// notifier delivers state changes to OnStateChange and to the watchers
// added since (keyed sets' receivers), with no breaker lock held, in the
// order they happened: for each change, OnStateChange first, then the
// watchers in the order they were added. Transitions are queued under the
// breaker's lock; whichever goroutine finds the queue non-empty and nobody
// draining it delivers every queued change in order. A callback that
// itself causes a transition only queues it: the drain loop delivers it
// next.
//
// A callback that panics (or calls runtime.Goexit) ends the drain on its
// goroutine and the panic goes on; it is not called again for that change,
// and the other receivers get that change and the ones queued after it,
// each exactly once, when the next event of the breaker drains the queue.
type notifier struct {
	fn     func(from, to State)
	name   string
	active atomic.Bool // fn or a watcher is set: transitions are queued

	mu       sync.Mutex
	watchers []watcher // replaced, never modified in place
	ids      uint64    // the last watcher's id
	q        []transition
	next     int // the receiver of q[0] to call next: 0 for fn, i+1 for watchers[i]
	draining bool
}

type watcher struct {
	key string
	fn  func(StateChange)
	id  uint64
}

type transition struct {
	from, to State
	at       time.Time
}

// watch adds a receiver of the state changes from now on. A nil fn is
// ignored.
func (n *notifier) watch(key string, fn func(StateChange)) (id uint64) {
	if fn == nil {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ids++
	n.watchers = append(n.watchers[:len(n.watchers):len(n.watchers)], watcher{key, fn, n.ids})
	n.active.Store(true)
	return n.ids
}

// unwatch stops the receiver watch returned id for: its slot stays (a
// drain in progress counts on the positions), with a receiver that does
// nothing, so that what the old one held can go.
func (n *notifier) unwatch(id uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ws := append([]watcher(nil), n.watchers...)
	for i := range ws {
		if ws[i].id == id && id != 0 {
			ws[i] = watcher{key: ws[i].key, fn: func(StateChange) {}}
		}
	}
	n.watchers = ws
}

// push queues a transition that happened at at. Callers may hold the
// breaker's lock.
func (n *notifier) push(from, to State, at time.Time) {
	if !n.active.Load() {
		return
	}
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
	held := true
	defer func() {
		// n.mu is released if a callback panicked or called
		// runtime.Goexit: the next deliver must be able to go on.
		if !held {
			n.mu.Lock()
		}
		n.draining = false
		n.mu.Unlock()
	}()
	for len(n.q) > 0 {
		t, i, ws := n.q[0], n.next, n.watchers
		if i > len(ws) {
			n.q, n.next = n.q[1:], 0
			continue
		}
		n.next = i + 1 // before the call: a receiver that panics is not called again
		if i == 0 && n.fn == nil {
			continue
		}
		held = false
		n.mu.Unlock()
		if i == 0 {
			n.fn(t.from, t.to)
		} else {
			ws[i-1].fn(StateChange{Name: n.name, Key: ws[i-1].key, From: t.from, To: t.to, At: t.at})
		}
		n.mu.Lock()
		held = true
	}
	n.q = nil
}

// push queues a transition for the receivers of state changes, if any.
// Callers may hold the breaker's lock.
func (b *Breaker) push(from, to State, at time.Time) {
	if n := b.note.Load(); n != nil {
		n.push(from, to, at)
	}
}

// deliver runs queued callbacks, if any. Callers must not hold the
// breaker's lock.
func (b *Breaker) deliver() {
	if n := b.note.Load(); n != nil {
		n.deliver()
	}
}
