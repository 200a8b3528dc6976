package grpcmw

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/callguard/callguard/endpoint"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// BalancerName is the name of callguard's load-balancing policy, which
// grpc-go knows from this package's init: a service config selects it by
// its loadBalancingConfig (see [EndpointHealth] for the fields), or a
// client by [EndpointHealth.DialOption]. It wraps a child policy
// (round_robin by default) and keeps a breaker per endpoint (package
// endpoint): an endpoint whose breaker opens is ejected from the picks,
// probed back through half-open and readmitted, never more than the max
// ejection percent at once; a retry or a hedge of a call made through
// the interceptors goes to an endpoint its earlier attempts did not try.
const BalancerName = "callguard_endpoints"

func init() { balancer.Register(lbBuilder{}) }

type lbBuilder struct{}

func (lbBuilder) Name() string { return BalancerName }

func (lbBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := &lb{cc: cc, opts: opts, subs: map[balancer.SubConn]string{}, ready: map[balancer.SubConn]bool{}, addrs: map[string]string{}}
	b.wrapped = &lbConn{ClientConn: cc, b: b}
	return b
}

// lb is one channel's instance of the policy.
type lb struct {
	cc      balancer.ClientConn
	wrapped *lbConn
	opts    balancer.BuildOptions

	child     balancer.Balancer
	childName string
	health    *EndpointHealth
	set       *endpoint.Set

	mu    sync.Mutex
	subs  map[balancer.SubConn]string // a SubConn's endpoint (by its first address)
	ready map[balancer.SubConn]bool   // the SubConns READY now
	addrs map[string]string           // an address's endpoint
}

// lbConn is the ClientConn the child policy sees: it learns which
// endpoint each SubConn is for, and wraps the child's pickers.
type lbConn struct {
	balancer.ClientConn
	b *lb
}

func (c *lbConn) NewSubConn(addrs []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	b := c.b
	var sc balancer.SubConn
	listen := opts.StateListener
	opts.StateListener = func(s balancer.SubConnState) {
		b.mu.Lock()
		if s.ConnectivityState == connectivity.Ready {
			b.ready[sc] = true
		} else {
			delete(b.ready, sc)
		}
		b.mu.Unlock()
		if listen != nil {
			listen(s)
		}
	}
	//lint:ignore SA1019 the child policy (pick_first under round_robin) makes its SubConns through this method: the policy passes them on.
	sc, err := c.ClientConn.NewSubConn(addrs, opts)
	if err != nil || len(addrs) == 0 {
		return sc, err
	}
	b.mu.Lock()
	key, ok := b.addrs[addrs[0].Addr]
	if !ok {
		key = addrs[0].Addr
	}
	b.subs[sc] = key
	b.mu.Unlock()
	return sc, nil
}

func (c *lbConn) UpdateState(s balancer.State) {
	b := c.b
	if s.Picker != nil && b.set != nil {
		b.mu.Lock()
		p := &lbPicker{child: s.Picker, set: b.set, eps: make(map[balancer.SubConn]*endpoint.Endpoint, len(b.subs))}
		for sc, key := range b.subs {
			if ep := b.set.Endpoint(key); ep != nil {
				p.eps[sc] = ep
				if b.ready[sc] {
					p.ready = append(p.ready, readySub{sc, ep})
				}
			}
		}
		b.mu.Unlock()
		slices.SortFunc(p.ready, func(a, b readySub) int { return strings.Compare(a.ep.Addr(), b.ep.Addr()) })
		s.Picker = p
	}
	c.ClientConn.UpdateState(s)
}

func (b *lb) UpdateClientConnState(s balancer.ClientConnState) error {
	cfg, _ := s.BalancerConfig.(*lbConfig)
	if cfg == nil {
		var err error
		if cfg, err = parseLBConfig(nil); err != nil {
			return err
		}
	}
	if b.set == nil || b.health != cfg.health {
		set, err := cfg.health.newSet(b.opts.Target.String())
		if err != nil {
			return err
		}
		if b.set != nil {
			b.health.drop(b.set)
		}
		b.set, b.health = set, cfg.health
	}
	if b.child == nil || b.childName != cfg.child.Name() {
		if b.child != nil {
			b.child.Close()
		}
		b.child, b.childName = cfg.child.Build(b.wrapped, b.opts), cfg.child.Name()
	}
	keys, addrs := endpointsOf(s.ResolverState)
	b.mu.Lock()
	b.addrs = addrs
	for sc, key := range b.subs {
		if _, ok := addrs[key]; !ok {
			delete(b.subs, sc)
			delete(b.ready, sc)
		}
	}
	b.mu.Unlock()
	b.set.Update(keys)
	return b.child.UpdateClientConnState(balancer.ClientConnState{ResolverState: s.ResolverState, BalancerConfig: cfg.childConfig})
}

// endpointsOf returns the endpoints of a resolver's state (each named by
// its first address) and the endpoint of each address.
func endpointsOf(s resolver.State) ([]string, map[string]string) {
	addrs := map[string]string{}
	var keys []string
	add := func(as []resolver.Address) {
		if len(as) == 0 {
			return
		}
		key := as[0].Addr
		keys = append(keys, key)
		for _, a := range as {
			addrs[a.Addr] = key
		}
	}
	if len(s.Endpoints) > 0 {
		for _, e := range s.Endpoints {
			add(e.Addresses)
		}
	} else {
		for _, a := range s.Addresses {
			add([]resolver.Address{a})
		}
	}
	return keys, addrs
}

func (b *lb) ResolverError(err error) {
	if b.child != nil {
		b.child.ResolverError(err)
		return
	}
	b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.TransientFailure, Picker: base{err: err}})
}

// UpdateSubConnState is not called: SubConns report to their own
// listeners.
func (b *lb) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}

func (b *lb) Close() {
	if b.child != nil {
		b.child.Close()
	}
	if b.set != nil {
		b.health.drop(b.set)
	}
}

func (b *lb) ExitIdle() {
	if b.child != nil {
		b.child.ExitIdle()
	}
}

// base is a picker that fails every pick with err.
type base struct{ err error }

func (p base) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, p.err
}

// lbPicker is the child's picker with the endpoints' breakers before it.
type lbPicker struct {
	child balancer.Picker
	set   *endpoint.Set
	eps   map[balancer.SubConn]*endpoint.Endpoint
	ready []readySub // the READY SubConns when the child made its picker, by address
	turn  atomic.Uint32
}

type readySub struct {
	sc balancer.SubConn
	ep *endpoint.Endpoint
}

// childTurns is how many of a pick's candidates the child policy names:
// after them, the picker goes through the READY endpoints itself, from
// a turn of its own, so that a retry finds the endpoint its call has not
// tried even when other calls' picks move the child's turn between its own.
const childTurns = 2

func (p *lbPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	i, from := 0, 0
	res, pass, err := endpoint.Pick(info.Ctx, p.set, childTurns+len(p.ready), func() (balancer.PickResult, *endpoint.Endpoint, error) {
		i++
		if i <= childTurns || len(p.ready) == 0 {
			r, err := p.child.Pick(info)
			if err != nil {
				return r, nil, err
			}
			return r, p.eps[r.SubConn], nil
		}
		if i == childTurns+1 {
			from = int(p.turn.Add(1))
		}
		r := p.ready[(from+i)%len(p.ready)]
		return balancer.PickResult{SubConn: r.sc}, r.ep, nil
	})
	if err != nil || pass.Endpoint() == nil {
		return res, err
	}
	d := newPickDone()
	d.pass, d.next = pass, res.Done
	res.Done = d.fn
	return res, nil
}

// pickDone reports a pick's outcome to its endpoint: pooled, with its
// method value bound once, so that a pick allocates nothing.
type pickDone struct {
	pass endpoint.Pass
	next func(balancer.DoneInfo)
	fn   func(balancer.DoneInfo)
}

var donePool sync.Pool

func newPickDone() *pickDone {
	if d, ok := donePool.Get().(*pickDone); ok {
		return d
	}
	d := &pickDone{}
	d.fn = d.done
	return d
}

func (d *pickDone) done(di balancer.DoneInfo) {
	pass, next := d.pass, d.next
	d.pass, d.next = endpoint.Pass{}, nil
	donePool.Put(d)
	o := outcomeOf(di.Err)
	if di.Err == nil && !di.BytesSent && !di.BytesReceived {
		o = endpoint.NotSent // grpc-go drops a pick whose transport is not ready
	}
	pass.Done(o)
	if next != nil {
		next(di)
	}
}

// outcomeOf reads an RPC's end for its endpoint: a status the server (or
// the transport to it) gave for its own failure fails it; a deadline or
// a cancellation ended it; anything else is an answer.
func outcomeOf(err error) endpoint.Outcome {
	if err == nil {
		return endpoint.Answered
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.DataLoss:
		return endpoint.Failed
	case codes.DeadlineExceeded, codes.Canceled:
		return endpoint.Ended
	}
	return endpoint.Answered
}

var errNoHealth = errors.New("grpcmw: " + BalancerName + ": no such EndpointHealth (its settings key is unknown in this process)")

func wrapErr(err error) error { return fmt.Errorf("grpcmw: %s: %w", BalancerName, err) }
