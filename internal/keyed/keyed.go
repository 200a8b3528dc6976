// Package keyed keeps one value per key (per host, per method, per target),
// built on first use and bounded in number, without a global registry. The
// gRPC and HTTP adapters keep a prepared chain per key this way.
//
// Eviction never drops what is still protecting the downstream: when a new
// key would exceed the bound, the least recently used key that is
// evictable goes (for the adapters: every breaker of its chain closed, with
// no failure counted against it, or the key not asked for in a long while,
// so that what its breakers know is stale: see Source); keys that are not
// (a breaker open, half-open or on its way to tripping) are kept, so an
// outage is never forgotten, and moved to the front. At most evictScan keys are
// looked at per new key, so a call costs O(1) whatever the number of keys.
// When none of them can go, the new key is not kept: it runs through the
// overflow value, built once with the key Overflow and shared by every key
// that finds no room, so that more failing keys than the bound still trip
// a breaker (the overflow chain's) instead of rebuilding a closed chain per
// call.
package keyed

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Overflow is the key the overflow value is built with.
const Overflow = "(overflow)"

// evictScan is how many of the least recently used keys a new key looks at
// for one to evict; after a scan that found none, new keys overflow
// without one for noRoomFor.
const (
	evictScan = 8
	noRoomFor = 10 * time.Millisecond
)

// Set maps keys to values built on first use. It is safe for concurrent
// use.
type Set[T any] struct {
	build     func(key string) (T, error)
	evictable func(v T, idle time.Duration) bool
	start     time.Time // what entries' use times count from
	max       int
	onEvict   func(key string)
	onEvicted func(v T)

	mu       sync.Mutex
	m        map[string]*entry[T]
	lru      entry[T] // the ring's sentinel: lru.next is the most recently used
	n        int      // entries kept
	building map[string]*flight[T]
	over     *flight[T]    // the overflow value: built, or being built
	noRoom   time.Duration // until then (since start), new keys overflow without a scan

	evicted, overflowed atomic.Uint64
}

// entry is a kept value, in a ring ordered by use (intrusive: no
// allocation of its own per key).
type entry[T any] struct {
	key        string
	v          T
	used       time.Duration // last Get, since the Set's start
	prev, next *entry[T]
}

func (k *Set[T]) unlink(e *entry[T]) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (k *Set[T]) pushFront(e *entry[T]) {
	e.prev, e.next = &k.lru, k.lru.next
	k.lru.next.prev = e
	k.lru.next = e
}

func (k *Set[T]) moveToFront(e *entry[T]) {
	if k.lru.next != e {
		k.unlink(e)
		k.pushFront(e)
	}
}

// flight is a build in progress: callers of the same key wait for it.
type flight[T any] struct {
	done chan struct{}
	v    T
	err  error
}

// Options are a Set's optional parts.
type Options[T any] struct {
	// Evictable reports whether a value, not asked for since idle, may
	// be evicted (nil: always).
	Evictable func(v T, idle time.Duration) bool
	// OnEvict is called with the key of each value evicted, with no lock
	// held, on the goroutine of the call that evicted it.
	OnEvict func(key string)
	// Evicted is called with each value evicted, before OnEvict, likewise.
	Evicted func(v T)
}

// New returns a Set that builds a key's value with build and keeps at most
// max of them.
func New[T any](build func(key string) (T, error), max int, o Options[T]) (*Set[T], error) {
	switch {
	case build == nil:
		return nil, errors.New("needs a function that builds a chain for a key")
	case max < 1:
		return nil, errors.New("the maximum number of keys must be >= 1")
	}
	if o.Evictable == nil {
		o.Evictable = func(T, time.Duration) bool { return true }
	}
	k := &Set[T]{build: build, evictable: o.Evictable, start: time.Now(), max: max, onEvict: o.OnEvict, onEvicted: o.Evicted,
		m: make(map[string]*entry[T]), building: make(map[string]*flight[T])}
	k.lru.prev, k.lru.next = &k.lru, &k.lru
	return k, nil
}

// Get returns the value for key, building it on first use; callers that
// ask for a key being built wait for that build. A new key that finds no
// room (see the package documentation) gets the overflow value.
func (k *Set[T]) Get(key string) (T, error) {
	v, _, err := k.GetReporting(key)
	return v, err
}

// GetReporting is Get, and reports whether key got the overflow value.
func (k *Set[T]) GetReporting(key string) (T, bool, error) {
	k.mu.Lock()
	if e, ok := k.m[key]; ok {
		k.moveToFront(e)
		e.used = time.Since(k.start)
		v := e.v
		k.mu.Unlock()
		return v, false, nil
	}
	if f, ok := k.building[key]; ok { // another caller is building it: wait
		k.mu.Unlock()
		<-f.done
		return f.v, false, f.err
	}
	var gone string
	var goneV T
	evicted := false
	if k.n+len(k.building) >= k.max {
		if time.Since(k.start) < k.noRoom {
			v, err := k.overflowLocked() // unlocks
			return v, true, err
		}
		gone, goneV, evicted = k.evictLocked()
		if !evicted {
			// Nothing could go: the next scan in 10 ms at the earliest, so
			// that calls of overflowed keys do not each pay one.
			k.noRoom = time.Since(k.start) + noRoomFor
			v, err := k.overflowLocked() // unlocks
			return v, true, err
		}
	}
	f := &flight[T]{done: make(chan struct{}), err: errors.New("the chain builder panicked for key " + key)}
	k.building[key] = f
	k.mu.Unlock()
	if evicted && k.onEvicted != nil {
		k.onEvicted(goneV)
	}
	if evicted && k.onEvict != nil {
		k.onEvict(gone)
	}
	defer k.land(key, f)   // also if build panics: the waiters get an error
	v, err := k.build(key) // outside the lock: build may be slow
	f.v, f.err = v, err
	return v, false, err
}

// evictLocked evicts the least recently used evictable value among the
// last evictScan, moving those it passes over to the front; k.mu held.
func (k *Set[T]) evictLocked() (key string, v T, ok bool) {
	now := time.Since(k.start)
	for range evictScan {
		e := k.lru.prev
		if e == &k.lru {
			return "", v, false
		}
		if !k.evictable(e.v, now-e.used) {
			k.moveToFront(e)
			continue
		}
		k.unlink(e)
		k.n--
		delete(k.m, e.key)
		k.evicted.Add(1)
		return e.key, e.v, true
	}
	return "", v, false
}

// overflowLocked returns the overflow value, building it on first use;
// k.mu held, and released.
func (k *Set[T]) overflowLocked() (T, error) {
	k.overflowed.Add(1)
	if f := k.over; f != nil {
		k.mu.Unlock()
		<-f.done
		return f.v, f.err
	}
	f := &flight[T]{done: make(chan struct{}), err: errors.New("the chain builder panicked for key " + Overflow)}
	k.over = f
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		if f.err != nil {
			k.over = nil // built again by the next call
		}
		k.mu.Unlock()
		close(f.done)
	}()
	v, err := k.build(Overflow)
	f.v, f.err = v, err
	return v, err
}

// land ends the build of key: a value is kept (an error is not: the next
// call builds again), and the waiters are released.
func (k *Set[T]) land(key string, f *flight[T]) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.building, key)
	defer close(f.done) // after f is final
	if f.err != nil {
		var zero T
		f.v = zero
		return
	}
	e := &entry[T]{key: key, v: f.v, used: time.Since(k.start)}
	k.pushFront(e)
	k.m[key] = e
	k.n++
}

// Stats are a Set's counts.
type Stats struct {
	Kept       int    // values kept now, the overflow value not counted
	Evicted    uint64 // values evicted since the Set was made
	Overflowed uint64 // calls of new keys that found no room and got the overflow value
}

// Stats returns the Set's counts now.
func (k *Set[T]) Stats() Stats {
	k.mu.Lock()
	n := k.n
	k.mu.Unlock()
	return Stats{Kept: n, Evicted: k.evicted.Load(), Overflowed: k.overflowed.Load()}
}

// Len returns the number of values kept.
func (k *Set[T]) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n
}

// Each calls fn for every value kept, by key, and for the overflow value
// if it was built (key Overflow), without holding the Set's lock.
func (k *Set[T]) Each(fn func(key string, v T)) {
	k.mu.Lock()
	all := make([]entry[T], 0, k.n+1)
	for e := k.lru.next; e != &k.lru; e = e.next {
		all = append(all, entry[T]{key: e.key, v: e.v})
	}
	if f := k.over; f != nil {
		select {
		case <-f.done:
			if f.err == nil {
				all = append(all, entry[T]{key: Overflow, v: f.v})
			}
		default:
		}
	}
	k.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].key < all[j].key })
	for _, e := range all {
		fn(e.key, e.v)
	}
}
