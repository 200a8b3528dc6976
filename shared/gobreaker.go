package shared

import (
	"context"
	"errors"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// GobreakerStore is gobreaker/v2's SharedDataStore over go-redis, for
// [NewGobreaker]: a lock (SET NX with a 5 s expiry, gobreaker's own lock
// timeout) and the shared state's JSON under gobreaker's keys. Each
// operation's context ends after Budget (default 50 ms); unlike Share's
// operations, which run on clients of their own, the store's run on Client
// and end then only if Client honours context deadlines on socket I/O
// (redis.Options.ContextTimeoutEnabled) and does not retry past them.
type GobreakerStore struct {
	Client redis.UniversalClient
	Budget time.Duration
}

var errLocked = errors.New("shared: gobreaker's lock is held by another instance")

func (s GobreakerStore) ctx() (context.Context, context.CancelFunc) {
	b := s.Budget
	if b <= 0 {
		b = 50 * time.Millisecond
	}
	return context.WithTimeout(context.Background(), b)
}

// Lock takes gobreaker's lock, or fails at once if another holds it
// (gobreaker retries every 500 ms, for 5 s).
func (s GobreakerStore) Lock(name string) error {
	ctx, cancel := s.ctx()
	defer cancel()
	ok, err := s.Client.SetNX(ctx, name, "locked", 5*time.Second).Result()
	switch {
	case err != nil:
		return err
	case !ok:
		return errLocked
	}
	return nil
}

// Unlock releases gobreaker's lock.
func (s GobreakerStore) Unlock(name string) error {
	ctx, cancel := s.ctx()
	defer cancel()
	return s.Client.Del(ctx, name).Err()
}

// GetData reads gobreaker's shared state (nil if there is none yet).
func (s GobreakerStore) GetData(name string) ([]byte, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	data, err := s.Client.Get(ctx, name).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return data, err
}

// SetData writes gobreaker's shared state.
func (s GobreakerStore) SetData(name string, data []byte) error {
	ctx, cancel := s.ctx()
	defer cancel()
	return s.Client.Set(ctx, name, data, 0).Err()
}

// Gobreaker is gobreaker/v2's DistributedCircuitBreaker as a policy for a
// chain (an opaque one: the lint does not look into it), the alternative
// to [Share] that gobreaker ships. Every call reads the shared state, takes
// a Redis lock for the whole call (calls of the fleet run one at a time),
// and writes the state back: docs/shared.md measures what that costs. Its
// rejections are *breaker.OpenError values, matching breaker.ErrOpen.
type Gobreaker struct {
	cb   *gobreaker.DistributedCircuitBreaker[struct{}]
	name string
}

// NewGobreaker returns gobreaker's distributed breaker over store.
func NewGobreaker(store gobreaker.SharedDataStore, s gobreaker.Settings) (*Gobreaker, error) {
	cb, err := gobreaker.NewDistributedCircuitBreaker[struct{}](store, s)
	if err != nil {
		return nil, err
	}
	return &Gobreaker{cb: cb, name: s.Name}, nil
}

// Do runs call through the distributed breaker.
func (g *Gobreaker) Do(ctx context.Context, call func(context.Context) error) error {
	_, err := g.cb.Execute(func() (struct{}, error) { return struct{}{}, call(ctx) })
	switch {
	case errors.Is(err, gobreaker.ErrOpenState):
		return &breaker.OpenError{Name: g.name}
	case errors.Is(err, gobreaker.ErrTooManyRequests):
		return &breaker.OpenError{Name: g.name, Probes: true}
	}
	return err
}

// String returns "gobreaker-distributed <name>".
func (g *Gobreaker) String() string { return "gobreaker-distributed " + g.name }
