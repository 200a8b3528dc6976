package shared

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// The sharing's Redis operations run on clients of its own, made with the
// options of Options.Client (its address, dialer, credentials, TLS,
// database) but not its timeouts: a client that honours context deadlines
// on socket I/O, never retries, dials within the budget, and whose every
// connection the sharing can close. A client's options are the user's to
// choose for the user's own commands; these operations have the budget.
//
// One client carries the operations (one at a time), another the
// subscription, so that an operation cut at its budget closes its own
// connections and not the subscription's.
type clients struct {
	ops, sub           redis.UniversalClient
	opsConns, subConns *connSet
	closed             sync.Once
}

// errClosedConns is what a dial of a closed connSet returns.
var errClosedConns = errors.New("shared: closed (no new connection to Redis)")

// newClients makes the sharing's own clients after o.Client's options, and
// lets o.Instrument instrument them.
func newClients(o Options) (*clients, error) {
	c := &clients{opsConns: &connSet{}, subConns: &connSet{}}
	var err error
	if c.ops, err = derive(o.Client, o.Budget, c.opsConns, true); err != nil {
		return nil, err
	}
	if c.sub, err = derive(o.Client, o.Budget, c.subConns, false); err != nil {
		_ = c.ops.Close()
		return nil, err
	}
	if o.Instrument != nil {
		for _, cl := range []redis.UniversalClient{c.ops, c.sub} {
			if err := o.Instrument(cl); err != nil {
				c.close()
				return nil, fmt.Errorf("shared: Options.Instrument: %w", err)
			}
		}
	}
	return c, nil
}

// closeConns closes every connection of the sharing's, and refuses new
// ones: what waits on one returns at once.
func (c *clients) closeConns() {
	c.opsConns.close()
	c.subConns.close()
}

// close closes the connections, then the clients (once).
func (c *clients) close() {
	c.closeConns()
	c.closed.Do(func() {
		_ = c.ops.Close()
		_ = c.sub.Close()
	})
}

// derive makes a client of the sharing's after the user's: ops (the
// operations' client) has the budget for its timeouts; the subscription's
// keeps the user's read and write timeouts (its reads wait for messages
// with no deadline; a reconnect's handshake takes the user's), and both
// honour context deadlines, so that Share's subscription is within the
// budget.
func derive(user redis.UniversalClient, budget time.Duration, conns *connSet, ops bool) (redis.UniversalClient, error) {
	switch u := user.(type) {
	case *redis.Client:
		o := *u.Options()
		o.Dialer = conns.dialer(o.Dialer, o.TLSConfig, budget)
		o.MaxRetries, o.ContextTimeoutEnabled = -1, true
		o.DialTimeout, o.DialerRetries, o.DialerRetryBackoff = budget, 1, nil
		o.PoolSize, o.MaxConcurrentDials, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns, o.PoolTimeout = 2, 0, 0, 2, 0, budget
		o.PipelinePoolSize, o.AutoPipelineOptions = -1, nil
		o.Limiter, o.PushNotificationProcessor = nil, nil
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		o.ClientSideCacheConfig, o.ClientSideCache, o.ClientSideCacheRefreshOnInvalidate, o.ClientSideCacheCoalesceMisses = nil, nil, false, false
		if ops {
			o.ReadTimeout, o.WriteTimeout = budget, budget
		}
		return redis.NewClient(&o), nil
	case *redis.ClusterClient:
		o := *u.Options()
		o.Addrs = append([]string(nil), o.Addrs...)
		o.Dialer = conns.dialer(o.Dialer, o.TLSConfig, budget)
		o.MaxRetries, o.ContextTimeoutEnabled = -1, true
		o.DialTimeout, o.DialerRetries, o.DialerRetryBackoff = budget, 1, nil
		o.PoolSize, o.MaxConcurrentDials, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns, o.PoolTimeout = 2, 0, 0, 2, 0, budget
		o.PipelinePoolSize, o.AutoPipelineOptions = -1, nil
		o.PushNotificationProcessor = nil
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		if ops {
			o.ReadTimeout, o.WriteTimeout = budget, budget
		}
		return redis.NewClusterClient(&o), nil
	}
	return nil, fmt.Errorf("shared: Options.Client is a %T: want a *redis.Client (a failover client is one) or a *redis.ClusterClient, whose options the sharing's own connections are made with", user)
}

// op runs f within the budget; see do.
func (g *Group) op(ctx context.Context, f func(ctx context.Context) error) error {
	_, err := do(g, ctx, time.Now().Add(g.o.Budget), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, f(ctx)
	})
	return err
}

// errHeld is what an operation of the group's goroutine returns, without
// being made, after another ran out of its budget since the last tick.
var errHeld = errors.New("shared: an operation ran out of its budget since the last sync: held until the next")

// own runs f, an operation of the group's goroutine (or of Share, before
// the goroutine starts), within deadline: see do. After one fails for
// want of time (Redis did not answer within the budget), the goroutine
// makes no other until its next tick: what it skips is tried again there,
// as after any failure. So a Redis that does not answer costs the
// goroutine one budget a sync, not one a key and change, and the goroutine
// is back at its events (a key's Close) within a budget. (An operation
// that fails at once, Redis refusing it, holds nothing.)
func own[T any](g *Group, ctx context.Context, deadline time.Time, f func(ctx context.Context) (T, error)) (T, error) {
	if g.held {
		var zero T
		return zero, errHeld
	}
	v, err := do(g, ctx, deadline, f)
	if err != nil && ctx.Err() == nil && (errors.Is(err, ErrBudget) || !time.Now().Before(deadline)) {
		g.held = true
	}
	return v, err
}

// do runs f, an operation on the sharing's operations client, within
// deadline: see doOn.
func do[T any](g *Group, ctx context.Context, deadline time.Time, f func(ctx context.Context) (T, error)) (T, error) {
	return doOn(g, g.cl.opsConns, ctx, deadline, f)
}

// doOn runs f on a goroutine of its own with a context that ends at
// deadline, and returns its result if it comes by then. Past the deadline
// (or when ctx ends first) it returns ErrBudget (ctx's error) and, if f is
// still running, closes conns, every connection of the client f uses: f
// ends at once, whatever the client would do with the context, and its
// result is dropped. One operation runs at a time per group: an operation
// that finds the last one still running waits for it until its own
// deadline, so that nothing piles up behind a hung Redis. It records Redis
// answering or not (an operation that ctx itself ended says nothing about
// Redis).
func doOn[T any](g *Group, conns *connSet, ctx context.Context, deadline time.Time, f func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	begun := time.Now()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	type result struct {
		v   T
		err error
	}
	var r result
	select {
	case g.slot <- struct{}{}:
		g.opsMu.Lock()
		if g.closed {
			g.opsMu.Unlock()
			<-g.slot
			return zero, ErrClosed
		}
		g.ops.Add(1)
		g.opsMu.Unlock()
		octx, cancel := context.WithDeadline(ctx, deadline)
		stopOnClose := context.AfterFunc(g.ctx, cancel)
		res := make(chan result, 1)
		var (
			mu       sync.Mutex // guards returned, and the closing of conns
			returned bool       // f returned: its connection, back in the pool, is sound
		)
		// giveUp ends f, if it is still running, by closing conns.
		giveUp := func() {
			mu.Lock()
			defer mu.Unlock()
			if !returned {
				conns.abort()
			}
		}
		go func() {
			defer g.ops.Done()
			defer func() { <-g.slot }()
			defer cancel()
			defer stopOnClose()
			v, err := f(octx)
			mu.Lock()
			returned = true
			mu.Unlock()
			if g.o.observe != nil {
				g.o.observe(time.Since(begun), time.Since(deadline), err)
			}
			if errors.Is(err, redis.Nil) {
				err = nil
			}
			res <- result{v, err}
		}()
		select {
		case r = <-res:
		case <-t.C:
			r.err = ErrBudget
			giveUp()
		case <-ctx.Done():
			r.err = ctx.Err()
			giveUp()
		}
	case <-t.C:
		r.err = ErrBudget
	case <-ctx.Done():
		r.err = ctx.Err()
	}
	if ctx.Err() != nil {
		return r.v, r.err
	}
	was := g.degraded.Swap(r.err != nil)
	if was != (r.err != nil) && g.o.OnDegraded != nil {
		g.o.OnDegraded(r.err)
	}
	return r.v, r.err
}

// A connSet is the connections of one of the sharing's clients: it dials
// them (through the user's dialer, within the budget) and can close them
// all, and cancel the dials in flight, whatever the client is doing with
// them.
type connSet struct {
	mu     sync.Mutex
	closed bool
	epoch  uint64 // aborts so far: a dial begun before one is not kept
	open   map[net.Conn]struct{}
	dials  map[*context.CancelFunc]struct{}
}

// dialer wraps next (the user's, or go-redis's own for a client that has
// none) so that every connection it makes is in s, and every dial ends
// within budget, or at abort: next runs on a goroutine of its own, and a
// connection it makes after the dial was given up is closed (a dialer that
// ignores its context, as go-redis's own does for TLS, ends within its own
// timeout: its goroutine ends then).
func (s *connSet) dialer(next func(ctx context.Context, network, addr string) (net.Conn, error), tlsConfig *tls.Config, budget time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if next == nil {
		d := &net.Dialer{KeepAlive: 5 * time.Minute}
		next = d.DialContext
		if tlsConfig != nil {
			next = (&tls.Dialer{NetDialer: d, Config: tlsConfig}).DialContext
		}
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, budget)
		defer cancel()
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, errClosedConns
		}
		epoch := s.epoch
		if s.dials == nil {
			s.dials = map[*context.CancelFunc]struct{}{}
		}
		s.dials[&cancel] = struct{}{}
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.dials, &cancel)
			s.mu.Unlock()
		}()

		type dialed struct {
			c   net.Conn
			err error
		}
		var (
			mu   sync.Mutex // guards gone, and the send
			gone bool       // the dial was given up: a late connection is closed
		)
		res := make(chan dialed, 1)
		go func() {
			c, err := next(ctx, network, addr)
			mu.Lock()
			defer mu.Unlock()
			if gone {
				if c != nil {
					_ = c.Close()
				}
				return
			}
			res <- dialed{c, err}
		}()
		var d dialed
		select {
		case d = <-res:
		case <-ctx.Done():
			mu.Lock()
			gone = true
			select {
			case d = <-res:
				if d.c != nil {
					_ = d.c.Close()
				}
			default:
			}
			mu.Unlock()
			return nil, ctx.Err()
		}
		if d.err != nil {
			return nil, d.err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed || s.epoch != epoch {
			_ = d.c.Close()
			return nil, errClosedConns
		}
		if s.open == nil {
			s.open = map[net.Conn]struct{}{}
		}
		s.open[d.c] = struct{}{}
		t := trackedConn{Conn: d.c, s: s}
		if sc, ok := d.c.(syscall.Conn); ok {
			// go-redis peeks at an idle connection's socket to tell a
			// closed one.
			return &trackedSysConn{t, sc}, nil
		}
		return &t, nil
	}
}

// abort closes every connection of s and cancels the dials in flight: an
// operation that waits on one returns at once. New dials go on.
func (s *connSet) abort() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abortLocked()
}

func (s *connSet) abortLocked() {
	s.epoch++
	for c := range s.open {
		_ = c.Close()
	}
	clear(s.open)
	for cancel := range s.dials {
		(*cancel)()
	}
}

// close aborts, and refuses new dials.
func (s *connSet) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.abortLocked()
}

func (s *connSet) forget(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, c)
}

// trackedConn leaves s when the client closes it.
type trackedConn struct {
	net.Conn
	s *connSet
}

func (c *trackedConn) Close() error {
	c.s.forget(c.Conn)
	return c.Conn.Close()
}

// NetConn returns the connection dialed (as crypto/tls.Conn's does).
func (c *trackedConn) NetConn() net.Conn { return c.Conn }

type trackedSysConn struct {
	trackedConn
	sc syscall.Conn
}

func (c *trackedSysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }
