package keyed

import (
	"errors"
	"fmt"

	"github.com/callguard/callguard/chain"
)

// Source is where an adapter finds what it runs a call through: one
// prepared chain, or one per key. T is the adapter's prepared form of a
// chain (the chain and what the adapter derived from it once).
type Source[T any] struct {
	single T
	keyed  *Set[T]
}

// PerKeyOption is the part of an adapter's configuration that makes chains
// per key.
type PerKeyOption struct {
	Name    string                                 // the option's name, for errors: "PerHost", "PerKey", …
	KeyNil  bool                                   // no key function was given
	Build   func(key string) (*chain.Chain, error) // nil: not given
	MaxKeys int
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
	k, err := New(func(key string) (T, error) {
		var zero T
		c, err := build(key)
		switch {
		case err != nil:
			return zero, fmt.Errorf("%s: building the chain for key %q: %w", pkg, key, err)
		case c == nil:
			return zero, fmt.Errorf("%s: the chain builder returned nil for key %q", pkg, key)
		}
		return prepare(key, c)
	}, perKey.MaxKeys)
	if err != nil {
		return Source[T]{}, fmt.Errorf("%s: %s: %w", pkg, perKey.Name, err)
	}
	return Source[T]{keyed: k}, nil
}

// PerKey reports whether the chain depends on a key.
func (s Source[T]) PerKey() bool { return s.keyed != nil }

// Get returns the prepared chain for key (ignored without per-key chains).
func (s Source[T]) Get(key string) (T, error) {
	if s.keyed != nil {
		return s.keyed.Get(key)
	}
	return s.single, nil
}

// Each calls fn for the single chain (key "") or for every keyed chain
// kept, by key.
func (s Source[T]) Each(fn func(key string, v T)) {
	if s.keyed != nil {
		s.keyed.Each(fn)
		return
	}
	fn("", s.single)
}
