// Package keyed keeps one chain per key (per host, per method, per target),
// built on first use and bounded in number: the least recently used is
// dropped when a new key would exceed the bound. The gRPC and HTTP adapters
// use it for per-key breaker state without a global registry.
package keyed

import (
	"container/list"
	"errors"
	"sync"

	"github.com/callguard/callguard/chain"
)

// Chains maps keys to chains. It is safe for concurrent use.
type Chains struct {
	build func(key string) (*chain.Chain, error)
	max   int

	mu       sync.Mutex
	m        map[string]*list.Element
	lru      list.List // of *entry, most recent first
	building map[string]*flight
}

type entry struct {
	key string
	c   *chain.Chain
}

// flight is a build in progress: callers of the same key wait for it.
type flight struct {
	done chan struct{}
	c    *chain.Chain
	err  error
}

// New returns a Chains that builds a key's chain with build and keeps at
// most max of them.
func New(build func(key string) (*chain.Chain, error), max int) (*Chains, error) {
	switch {
	case build == nil:
		return nil, errors.New("needs a function that builds a chain for a key")
	case max < 1:
		return nil, errors.New("the maximum number of keys must be >= 1")
	}
	return &Chains{build: build, max: max, m: make(map[string]*list.Element), building: make(map[string]*flight)}, nil
}

// Get returns the chain for key, building it on first use; callers that
// ask for a key being built wait for that build.
func (k *Chains) Get(key string) (*chain.Chain, error) {
	k.mu.Lock()
	if e, ok := k.m[key]; ok {
		k.lru.MoveToFront(e)
		c := e.Value.(*entry).c
		k.mu.Unlock()
		return c, nil
	}
	if f, ok := k.building[key]; ok { // another caller is building it: wait
		k.mu.Unlock()
		<-f.done
		return f.c, f.err
	}
	f := &flight{done: make(chan struct{}), err: errors.New("the chain builder panicked for key " + key)}
	k.building[key] = f
	k.mu.Unlock()
	defer k.land(key, f)   // also if build panics: the waiters get an error
	c, err := k.build(key) // outside the lock: build may be slow
	if err == nil && c == nil {
		err = errors.New("the chain builder returned nil for key " + key)
	}
	f.c, f.err = c, err
	return c, err
}

// land ends the build of key: a chain is kept (an error is not: the next
// call builds again), and the waiters are released.
func (k *Chains) land(key string, f *flight) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.building, key)
	defer close(f.done) // after f is final
	if f.err != nil {
		f.c = nil
		return
	}
	k.m[key] = k.lru.PushFront(&entry{key, f.c})
	for k.lru.Len() > k.max {
		old := k.lru.Back()
		k.lru.Remove(old)
		delete(k.m, old.Value.(*entry).key)
	}
}

// Len returns the number of chains kept.
func (k *Chains) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lru.Len()
}

// Source is where an adapter finds the chain for a call: one chain, or one
// per key.
type Source struct {
	single *chain.Chain
	keyed  *Chains
	err    error
}

// NewSource returns a Source of the single chain, or, with perKey, of chains
// built per key; check vets every chain (nil: none); pkg prefixes its
// errors. An invalid source reports its error on every Get.
func NewSource(pkg string, single *chain.Chain, perKey bool, build func(string) (*chain.Chain, error), maxKeys int, check func(*chain.Chain) error) Source {
	if check == nil {
		check = func(*chain.Chain) error { return nil }
	}
	if !perKey {
		if single == nil {
			return Source{err: errors.New(pkg + ": nil chain, and no per-key option")}
		}
		if err := check(single); err != nil {
			return Source{err: err}
		}
		return Source{single: single}
	}
	checked := build
	if build != nil {
		checked = func(key string) (*chain.Chain, error) {
			c, err := build(key)
			if err == nil && c != nil {
				err = check(c)
			}
			return c, err
		}
	}
	k, err := New(checked, maxKeys)
	if err != nil {
		return Source{err: errors.New(pkg + ": per-key chains: " + err.Error())}
	}
	return Source{keyed: k}
}

// PerKey reports whether the chain depends on a key.
func (s Source) PerKey() bool { return s.keyed != nil }

// Get returns the chain for key (ignored without per-key chains).
func (s Source) Get(key string) (*chain.Chain, error) {
	switch {
	case s.err != nil:
		return nil, s.err
	case s.keyed != nil:
		return s.keyed.Get(key)
	}
	return s.single, nil
}
