package breaker

import "sync"

// notifier delivers state changes to OnStateChange with no breaker lock held,
// in the order they happened. Transitions are queued under the breaker's
// lock; whichever goroutine finds the queue non-empty and nobody draining it
// delivers every queued change in order. A callback that itself causes a
// transition only queues it: the drain loop delivers it next.
type notifier struct {
	fn       func(from, to State)
	mu       sync.Mutex
	q        []transition
	draining bool
}

type transition struct{ from, to State }

// push queues a transition. Callers may hold the breaker's lock.
func (n *notifier) push(from, to State) {
	if n.fn == nil {
		return
	}
	n.mu.Lock()
	n.q = append(n.q, transition{from, to})
	n.mu.Unlock()
}

// deliver runs queued callbacks. Callers must not hold the breaker's lock.
func (n *notifier) deliver() {
	if n.fn == nil {
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
		n.mu.Unlock()
		n.fn(t.from, t.to)
		n.mu.Lock()
	}
	n.q = nil
}
