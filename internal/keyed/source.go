package keyed

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/internal/adapter"
	"github.com/callguard/callguard/internal/bridge"
)

// Source is where an adapter finds what it runs a call through: one
// prepared chain, or one per key. T is the adapter's prepared form of a
// chain (the chain and what the adapter derived from it once).
type Source[T any] struct {
	single T
	keyed  *Set[kept[T]]
}

// kept is a keyed value with its chain, whose breakers decide whether it
// may be evicted.
type kept[T any] struct {
	v     T
	c     *chain.Chain
	stale time.Duration // idle this long, what its breakers know is stale
}

// staleAfter is how long a key must go unused before what its breakers
// know is stale, whatever their state: twice the longest open stay or
// window among them, and at least a minute. A key a client stopped asking
// for after a failure (a junk host, say) is evictable then, and cannot
// hold its slot forever.
func staleAfter(c *chain.Chain) time.Duration {
	d := time.Minute
	for _, b := range adapter.Breakers(c) {
		s := b.Settings()
		for _, x := range []time.Duration{s.OpenTimeout, s.MaxOpenTimeout, s.Window} {
			if x < math.MaxInt64/2 {
				d = max(d, 2*x)
			}
		}
	}
	return d
}

// evictable reports that evicting k forgets nothing about the downstream:
// every breaker of its chain is closed with no failure counted, or k has
// not been asked for in longer than its stale time.
func (k kept[T]) evictable(idle time.Duration) bool {
	if idle >= k.stale {
		return true
	}
	for _, b := range adapter.Breakers(k.c) {
		if !bridge.BreakerClean(b) {
			return false
		}
	}
	return true
}

// retire ends what outlives an evicted chain's use: its breakers' sharing
// through Redis (package shared), if any.
func (k kept[T]) retire() {
	if retired := bridge.BreakerRetired; retired != nil {
		for _, b := range adapter.Breakers(k.c) {
			retired(b)
		}
	}
}

// PerKeyOption is the part of an adapter's configuration that makes chains
// per key.
type PerKeyOption struct {
	Name    string                                 // the option's name, for errors: "PerHost", "PerKey", …
	KeyNil  bool                                   // no key function was given
	Build   func(key string) (*chain.Chain, error) // nil: not given
	MaxKeys int
	OnEvict func(key string) // told of each key evicted (nil: nobody)
}

// Check returns the error of an invalid per-key option, naming it; pkg
// prefixes it.
func (o PerKeyOption) Check(pkg string) error {
	switch {
	case o.KeyNil:
		return fmt.Errorf("%s: %s needs a key function", pkg, o.Name)
	case o.Build == nil:
		return fmt.Errorf("%s: %s needs a function that builds a chain", pkg, o.Name)
	case o.MaxKeys < 1:
		return fmt.Errorf("%s: %s(…, %d): the maximum number of keys must be >= 1", pkg, o.Name, o.MaxKeys)
	}
	return nil
}

// NewSource returns a Source of the single chain, or, with perKey (not nil),
// of chains built per key. prepare vets a chain and derives the adapter's
// form of it, for its key ("" for the single chain); an error from it is
// returned here for the single chain, and by Get for a key. pkg prefixes
// the errors.
func NewSource[T any](pkg string, single *chain.Chain, perKey *PerKeyOption, prepare func(key string, c *chain.Chain) (T, error)) (Source[T], error) {
	if perKey == nil {
		if single == nil {
			return Source[T]{}, errors.New(pkg + ": nil chain, and no per-key option")
		}
		v, err := prepare("", single)
		if err != nil {
			return Source[T]{}, err
		}
		return Source[T]{single: v}, nil
	}
	if err := perKey.Check(pkg); err != nil {
		return Source[T]{}, err
	}
	build := perKey.Build
	k, err := New(func(key string) (kept[T], error) {
		c, err := build(key)
		switch {
		case err != nil:
			return kept[T]{}, fmt.Errorf("%s: building the chain for key %q: %w", pkg, key, err)
		case c == nil:
			return kept[T]{}, fmt.Errorf("%s: the chain builder returned nil for key %q", pkg, key)
		}
		v, err := prepare(key, c)
		if err != nil {
			return kept[T]{}, err
		}
		return kept[T]{v: v, c: c, stale: staleAfter(c)}, nil
	}, perKey.MaxKeys, Options[kept[T]]{Evictable: kept[T].evictable, OnEvict: perKey.OnEvict, Evicted: kept[T].retire})
	if err != nil {
		return Source[T]{}, fmt.Errorf("%s: %s: %w", pkg, perKey.Name, err)
	}
	return Source[T]{keyed: k}, nil
}

// PerKey reports whether the chain depends on a key.
func (s Source[T]) PerKey() bool { return s.keyed != nil }

// Get returns the prepared chain for key (ignored without per-key chains).
func (s Source[T]) Get(key string) (T, error) {
	v, _, err := s.GetKey(key)
	return v, err
}

// GetKey is Get, and returns the key of the chain it returns: key, or
// Overflow when key found no room.
func (s Source[T]) GetKey(key string) (T, string, error) {
	if s.keyed != nil {
		k, over, err := s.keyed.GetReporting(key)
		if over {
			key = Overflow
		}
		return k.v, key, err
	}
	return s.single, key, nil
}

// Each calls fn for the single chain (key "") or for every keyed chain
// kept, by key.
func (s Source[T]) Each(fn func(key string, v T)) {
	if s.keyed != nil {
		s.keyed.Each(func(key string, k kept[T]) { fn(key, k.v) })
		return
	}
	fn("", s.single)
}

// Stats returns the counts of the keyed set (zero for a single chain).
func (s Source[T]) Stats() Stats {
	if s.keyed == nil {
		return Stats{}
	}
	return s.keyed.Stats()
}
