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

	mu  sync.Mutex
	m   map[string]*list.Element
	lru list.List // of *entry, most recent first
}

type entry struct {
	key string
	c   *chain.Chain
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
	return &Chains{build: build, max: max, m: make(map[string]*list.Element)}, nil
}

// Get returns the chain for key, building it on first use.
func (k *Chains) Get(key string) (*chain.Chain, error) {
	k.mu.Lock()
	if e, ok := k.m[key]; ok {
		k.lru.MoveToFront(e)
		c := e.Value.(*entry).c
		k.mu.Unlock()
		return c, nil
	}
	k.mu.Unlock()
	c, err := k.build(key) // outside the lock: build may be slow
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("the chain builder returned nil for key " + key)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if e, ok := k.m[key]; ok { // built concurrently: keep the first
		k.lru.MoveToFront(e)
		return e.Value.(*entry).c, nil
	}
	k.m[key] = k.lru.PushFront(&entry{key, c})
	for k.lru.Len() > k.max {
		old := k.lru.Back()
		k.lru.Remove(old)
		delete(k.m, old.Value.(*entry).key)
	}
	return c, nil
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
