// Package keyed keeps one value per key (per host, per method, per target),
// built on first use and bounded in number: the least recently used is
// dropped when a new key would exceed the bound. The gRPC and HTTP adapters
// keep a prepared chain per key this way, without a global registry.
package keyed

import (
	"container/list"
	"errors"
	"sort"
	"sync"
)

// Set maps keys to values built on first use. It is safe for concurrent
// use.
type Set[T any] struct {
	build func(key string) (T, error)
	max   int

	mu       sync.Mutex
	m        map[string]*list.Element
	lru      list.List // of *entry[T], most recent first
	building map[string]*flight[T]
}

type entry[T any] struct {
	key string
	v   T
}

// flight is a build in progress: callers of the same key wait for it.
type flight[T any] struct {
	done chan struct{}
	v    T
	err  error
}

// New returns a Set that builds a key's value with build and keeps at most
// max of them.
func New[T any](build func(key string) (T, error), max int) (*Set[T], error) {
	switch {
	case build == nil:
		return nil, errors.New("needs a function that builds a chain for a key")
	case max < 1:
		return nil, errors.New("the maximum number of keys must be >= 1")
	}
	return &Set[T]{build: build, max: max, m: make(map[string]*list.Element), building: make(map[string]*flight[T])}, nil
}

// Get returns the value for key, building it on first use; callers that
// ask for a key being built wait for that build.
func (k *Set[T]) Get(key string) (T, error) {
	k.mu.Lock()
	if e, ok := k.m[key]; ok {
		k.lru.MoveToFront(e)
		v := e.Value.(*entry[T]).v
		k.mu.Unlock()
		return v, nil
	}
	if f, ok := k.building[key]; ok { // another caller is building it: wait
		k.mu.Unlock()
		<-f.done
		return f.v, f.err
	}
	f := &flight[T]{done: make(chan struct{}), err: errors.New("the chain builder panicked for key " + key)}
	k.building[key] = f
	k.mu.Unlock()
	defer k.land(key, f)   // also if build panics: the waiters get an error
	v, err := k.build(key) // outside the lock: build may be slow
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
	k.m[key] = k.lru.PushFront(&entry[T]{key, f.v})
	for k.lru.Len() > k.max {
		old := k.lru.Back()
		k.lru.Remove(old)
		delete(k.m, old.Value.(*entry[T]).key)
	}
}

// Len returns the number of values kept.
func (k *Set[T]) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lru.Len()
}

// Each calls fn for every value kept, by key, without holding the Set's
// lock.
func (k *Set[T]) Each(fn func(key string, v T)) {
	k.mu.Lock()
	all := make([]entry[T], 0, k.lru.Len())
	for e := k.lru.Front(); e != nil; e = e.Next() {
		all = append(all, *e.Value.(*entry[T]))
	}
	k.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].key < all[j].key })
	for _, e := range all {
		fn(e.key, e.v)
	}
}
