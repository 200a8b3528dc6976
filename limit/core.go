package limit

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// core is the admission engine shared by [Bulkhead] and [Limiter]: a
// semaphore whose size may change while it is in use, with a bounded FIFO
// queue of waiters.
//
// Admission takes no lock while nobody waits: a compare-and-swap on
// inflight against limit. Once a caller has to wait, arrivals go through
// mu and queue behind it, so the queue is served in order. A release
// decrements inflight and, only if someone waits, takes mu to hand the
// freed slot to the head of the queue.
//
// The fast paths and the queue meet through two atomics: an arrival that
// is about to queue increments pending before it looks at inflight, and a
// release decrements inflight before it looks at pending. Go's atomics are
// sequentially consistent, so at least one of the two sees the other: the
// arrival takes the freed slot itself, or the release finds the arrival
// (queued by then, since it queues under mu) and hands the slot over. A
// limit that rises does the same with limit in place of inflight.
type core struct {
	limit    atomic.Int64
	inflight atomic.Int64
	// pending counts the waiters in the queue and the arrivals on their
	// way into it: while it is not 0, releases take mu to serve the queue
	// and arrivals queue behind it.
	pending atomic.Int64
	queued  atomic.Int64 // waiters in the queue: Queued()
	// over, while not 0, lets calls past limit, up to it: the limit's
	// algorithm sees no congestion (see gradient2Engine.sample).
	over atomic.Int64

	maxQueue int
	maxWait  time.Duration
	made     bool     // set by the constructors: a zero core admits nothing
	lim      *Limiter // the Limiter whose core this is; nil for a Bulkhead's

	mu         sync.Mutex
	head, tail *waiter // FIFO, linked through next/prev
	waiters    sync.Pool
}

// waiter is one caller in the queue. Waiters are pooled per core, with
// their channel and timer, so that waiting allocates nothing once the pool
// is warm (and channels and timers stay inside one synctest bubble).
type waiter struct {
	next, prev *waiter
	ready      chan struct{} // capacity 1: the slot, sent once under mu
	granted    bool          // under mu: the slot was sent
	inflight   int           // under mu: calls in flight when the slot was granted
	timer      *time.Timer   // stopped when idle
}

func (c *core) init(limit, maxQueue int, maxWait time.Duration) {
	c.limit.Store(int64(limit))
	c.maxQueue = maxQueue
	c.maxWait = maxWait
	c.made = true
	c.waiters.New = func() any {
		t := time.NewTimer(math.MaxInt64)
		t.Stop()
		return &waiter{ready: make(chan struct{}, 1), timer: t}
	}
}

// tryAcquire takes a slot if one is free, and returns the number of calls
// in flight with this one, or 0.
func (c *core) tryAcquire() int {
	for {
		n := c.inflight.Load()
		if n >= c.limit.Load() && n >= c.over.Load() {
			return 0
		}
		if c.inflight.CompareAndSwap(n, n+1) {
			return int(n + 1)
		}
	}
}

// acquire takes a slot, waiting in the queue if there is one. It returns
// the number of calls in flight with this one, or a *RejectedError, or
// ctx's error if ctx ended while the call waited.
func (c *core) acquire(ctx context.Context) (int, error) {
	if c.pending.Load() == 0 {
		if n := c.tryAcquire(); n > 0 {
			return n, nil
		}
	}
	return c.acquireSlow(ctx)
}

func (c *core) acquireSlow(ctx context.Context) (int, error) {
	if !c.made {
		return 0, errZero
	}
	c.mu.Lock()
	c.pending.Add(1)
	// Only with nobody ahead: a free slot goes to the head of the queue.
	if c.head == nil {
		if n := c.tryAcquire(); n > 0 {
			c.pending.Add(-1)
			c.mu.Unlock()
			return n, nil
		}
	}
	q := int(c.queued.Load())
	if q >= c.maxQueue {
		c.pending.Add(-1)
		c.mu.Unlock()
		return 0, c.rejected(ReasonQueueFull, q, 0)
	}
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
		if err := ctx.Err(); err != nil {
			c.pending.Add(-1)
			c.mu.Unlock()
			return 0, err
		}
	}
	w := c.waiters.Get().(*waiter)
	w.granted = false
	c.push(w)
	c.queued.Add(1)
	c.mu.Unlock()

	start := time.Now()
	var expired <-chan time.Time
	if c.maxWait > 0 {
		w.timer.Reset(c.maxWait)
		expired = w.timer.C
	}
	select {
	case <-w.ready:
		w.timer.Stop()
		n := w.inflight
		c.waiters.Put(w)
		return n, nil
	case <-done:
		w.timer.Stop()
		if c.leave(w) {
			// The slot came as the context ended: give it back, as
			// x/sync/semaphore does, and report the context's end.
			c.release()
		}
		c.waiters.Put(w)
		return 0, ctx.Err()
	case <-expired:
		if c.leave(w) {
			n := w.inflight // the slot came in time after all
			c.waiters.Put(w)
			return n, nil
		}
		c.waiters.Put(w)
		return 0, c.rejected(ReasonMaxWait, int(c.queued.Load()), time.Since(start))
	}
}

// leave takes w out of the queue, or, if it was granted a slot meanwhile,
// receives the slot and reports true.
func (c *core) leave(w *waiter) (granted bool) {
	c.mu.Lock()
	if w.granted {
		c.mu.Unlock()
		<-w.ready // sent under mu before granted was set: never blocks
		return true
	}
	c.remove(w)
	c.queued.Add(-1)
	c.pending.Add(-1)
	c.mu.Unlock()
	return false
}

// release frees a slot and hands it to the head of the queue, if any.
func (c *core) release() {
	c.inflight.Add(-1)
	if c.pending.Load() != 0 {
		c.serve()
	}
}

// admitMore serves the queue after a rise of the limit: the next
// admission sees the new limit, and waiters get the new slots at once.
func (c *core) admitMore() {
	if c.pending.Load() != 0 {
		c.serve()
	}
}

// serve hands free slots to the waiters at the head of the queue.
func (c *core) serve() {
	c.mu.Lock()
	for c.head != nil {
		n := c.tryAcquire()
		if n == 0 {
			break
		}
		w := c.head
		c.remove(w)
		c.queued.Add(-1)
		c.pending.Add(-1)
		w.granted, w.inflight = true, n
		w.ready <- struct{}{}
	}
	c.mu.Unlock()
}

func (c *core) push(w *waiter) {
	w.prev, w.next = c.tail, nil
	if c.tail == nil {
		c.head = w
	} else {
		c.tail.next = w
	}
	c.tail = w
}

func (c *core) remove(w *waiter) {
	if w.prev == nil {
		c.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		c.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.next, w.prev = nil, nil
}

func (c *core) rejected(reason string, queued int, waited time.Duration) error {
	return &RejectedError{
		Limit:    int(c.limit.Load()),
		InFlight: int(c.inflight.Load()),
		Queued:   queued,
		Waited:   waited,
		Reason:   reason,
	}
}
