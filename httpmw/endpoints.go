package httpmw

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/endpoint"
	"github.com/callguard/callguard/internal/adapter"
)

// Endpoints is an http.RoundTripper over the addresses each host resolves
// to: one bad backend behind a name is ejected, not the whole service. It
// keeps an [endpoint.Set] per host name (req.URL.Hostname() in lower case,
// whatever the port), named by it, whose endpoints are the addresses the host resolves
// to, each with its breaker. It sends each request to one of them in turn
// (round-robin), skipping an ejected one and one that an earlier attempt
// of the same request (a retry, a hedge of a [Transport] above) tried,
// with the URL's host replaced by the address (the port kept, or the
// scheme's) and the Host header kept. The base then keeps a pool of
// connections per address; its MaxConnsPerHost bounds each address's.
// No more than the set's MaxEjectionPercent of a host's addresses is
// ejected at once: a failure of the whole host is the chain's breaker's
// to see (with [Standard], the host's).
//
// A request's outcome judges its address: a transport error is a failure
// (or, once the request's context is done, the caller's end: neutral,
// unless it ran longer than the set's slow threshold, a hang); a 5xx
// answer is a failure; any other answer counts for it, as long as it is
// not far slower than the typical address's (see [endpoint.Settings]).
// A 429 Too Many Requests is an answer: an overload refusal is the
// concurrency limit's business (see [Overloaded]), not a reason to take
// one address out. The latency is the time to the response's headers.
//
// A host's first request resolves it (bounded by the request's context);
// a lookup that fails fails the request, and the next request looks up
// again. Once its addresses are older than [ResolveEvery], one request
// looks them up again, synchronously, while the others go on with the old
// ones; a failure keeps the old ones for another period. Nothing runs in
// the background. An address that left gets no more requests; the base's
// idle connections to it are closed after its IdleConnTimeout.
//
// A host that is an IP literal, a request the base would send through a
// proxy (its Proxy function names one: the proxy resolves the host), and
// a scheme other than http and https go to the base as they are. An https
// request goes through a clone of the base, made once per host, whose TLS
// ServerName is the host name (unless the base's names one), so that the
// server's certificate is verified for the name, not the address.
//
// Put it directly under [New] or [Standard], as their base: each attempt
// of a retry or a hedge then goes to an address the request's earlier
// attempts did not try, when one is left, and their judgement of the
// waits for a bounded pool's connection holds (per host name). It is
// safe for concurrent use. Create one with [NewEndpoints].
type Endpoints struct {
	base     *http.Transport
	settings endpoint.Settings
	resolver lookuper
	every    time.Duration
	maxHosts int
	judge    *conns // nil unless base.MaxConnsPerHost > 0 (see endpointConns)

	mu    sync.Mutex
	hosts map[string]*host // by name
}

// lookuper resolves a host name to its addresses (*net.Resolver does).
type lookuper interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// host is one host name's endpoints.
type host struct {
	name string
	set  *endpoint.Set
	rr   atomic.Uint64 // the round-robin counter
	// due is when the addresses are to be looked up again, in UnixNano:
	// 0 before the first lookup that succeeded, MaxInt64 for never.
	due atomic.Int64
	// lookup is a token: the request that looks the host up holds it.
	lookup chan struct{}

	mu  sync.Mutex
	tls atomic.Pointer[http.Transport] // the https clone, made once under mu
}

// NewEndpoints checks s and the options and returns an [Endpoints] over
// base (nil: a clone of http.DefaultTransport), with an endpoint set per
// host made with s. An invalid setting or option is reported here, by
// name. A zero s.Breaker.Name names each host's breakers by the host and
// the address ("host/address"); one that is set is prefixed to both.
func NewEndpoints(base *http.Transport, s endpoint.Settings, opts ...EndpointsOption) (*Endpoints, error) {
	const pkg = "httpmw: NewEndpoints"
	cfg := &endpointsConfig{Problems: adapter.Problems{Pkg: pkg}, resolver: net.DefaultResolver, every: DefaultResolveEvery, maxHosts: DefaultMaxHosts}
	if err := adapter.Apply(&cfg.Problems, opts, func(o EndpointsOption) { o.applyEndpoints(cfg) }); err != nil {
		return nil, err
	}
	if _, err := endpoint.NewSet("", s); err != nil {
		return nil, fmt.Errorf("%s: %w", pkg, err)
	}
	if base == nil {
		base = http.DefaultTransport.(*http.Transport).Clone()
	}
	e := &Endpoints{base: base, settings: s, resolver: cfg.resolver, every: cfg.every, maxHosts: cfg.maxHosts, hosts: map[string]*host{}}
	if base.MaxConnsPerHost > 0 {
		e.judge = &conns{hosts: make(map[hostKey]*hostConns)}
	}
	return e, nil
}

// endpointConns makes an Endpoints known to a [Transport] over it: its
// attempts carry their call (see exchange.attempt), and it judges the
// waits for a connection of a bounded pool (see conns) with what this
// returns (nil: the pool is unbounded). The line is kept per host name,
// over all its addresses: a request cut while it waited for one address's
// connection to be made while another address's were in use is the
// client's wait, neutral to the chain's breaker of the host, and left to
// the address's own breaker here; when no address has a connection in
// use, the wait is the host's, as without Endpoints.
func (e *Endpoints) endpointConns() *conns {
	if e == nil {
		return nil
	}
	return e.judge
}

// hostFor returns the endpoints of the host name, nil if MaxHosts are kept
// and it is not one of them.
func (e *Endpoints) hostFor(name string) (*host, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if h := e.hosts[name]; h != nil {
		return h, nil
	}
	if len(e.hosts) >= e.maxHosts {
		return nil, nil
	}
	s := e.settings
	if s.Breaker.Name != "" {
		s.Breaker.Name += "/" + name
	} else {
		s.Breaker.Name = name
	}
	set, err := endpoint.NewSet(name, s)
	if err != nil {
		return nil, fmt.Errorf("httpmw: Endpoints: %w", err) // not reached: NewEndpoints checked s
	}
	h := &host{name: name, set: set, lookup: make(chan struct{}, 1)}
	e.hosts[name] = h
	return h, nil
}

// ErrNoAddresses is the error of a host lookup that found no address
// (wrapped with the host's name in a request's error).
var ErrNoAddresses = errors.New("httpmw: no address")

// endpoints returns h's endpoints, looking the host up first if it never
// was, or again if its addresses are due for it and no other request is
// at it.
func (e *Endpoints) endpoints(ctx context.Context, h *host) ([]*endpoint.Endpoint, error) {
	due := h.due.Load()
	if due != 0 {
		if time.Now().UnixNano() < due {
			return h.set.Endpoints(), nil
		}
		select {
		case h.lookup <- struct{}{}:
		default:
			return h.set.Endpoints(), nil // another request is looking it up
		}
		defer func() { <-h.lookup }()
		if h.due.Load() == due {
			addrs, err := e.resolve(ctx, h.name)
			switch {
			case err == nil:
				e.update(h, addrs)
				h.due.Store(e.dueFrom(time.Now()))
			case ctx.Err() == nil:
				h.due.Store(e.dueFrom(time.Now())) // the old addresses, for another period
			}
		}
		return h.set.Endpoints(), nil
	}
	select {
	case h.lookup <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("httpmw: Endpoints: waiting for the lookup of %q: %w", h.name, ctx.Err())
	}
	defer func() { <-h.lookup }()
	if h.due.Load() == 0 { // not looked up by the request that held the token before
		addrs, err := e.resolve(ctx, h.name)
		if err != nil {
			return nil, fmt.Errorf("httpmw: Endpoints: resolving %q: %w", h.name, err)
		}
		h.set.Update(addrs)
		h.due.Store(e.dueFrom(time.Now()))
	}
	return h.set.Endpoints(), nil
}

// update makes addrs h's addresses. If one of the old ones left, the idle
// connections of h's https clone are closed, so that none to an address
// that left is kept (net/http closes idle connections per transport, not
// per address: those to the others are made again). The shared base's
// idle connections to it go after the base's IdleConnTimeout.
func (e *Endpoints) update(h *host, addrs []string) {
	old := h.set.Endpoints()
	h.set.Update(addrs)
	t := h.tls.Load()
	if t == nil {
		return
	}
	for _, ep := range old {
		if !slices.Contains(addrs, ep.Addr()) {
			t.CloseIdleConnections()
			return
		}
	}
}

func (e *Endpoints) resolve(ctx context.Context, name string) ([]string, error) {
	addrs, err := e.resolver.LookupHost(ctx, name)
	if err == nil && len(addrs) == 0 {
		err = ErrNoAddresses
	}
	return addrs, err
}

// dueFrom is when addresses looked up at now are due for another lookup.
func (e *Endpoints) dueFrom(now time.Time) int64 {
	if e.every < 0 {
		return math.MaxInt64
	}
	return now.Add(e.every).UnixNano()
}

// RoundTrip implements http.RoundTripper: it sends req to one of its
// host's addresses. The caller's request is not modified: a shallow copy
// with its own URL goes to the base, and the response's Request is req.
func (e *Endpoints) RoundTrip(req *http.Request) (*http.Response, error) {
	if e == nil || e.base == nil {
		closeBody(req)
		return nil, errors.New("httpmw: a zero Endpoints; make one with httpmw.NewEndpoints")
	}
	if req.URL == nil {
		closeBody(req)
		return nil, errors.New("httpmw: Endpoints: a request without a URL")
	}
	name, port := req.URL.Hostname(), req.URL.Port()
	if port == "" {
		port = defaultPorts[req.URL.Scheme]
	}
	if defaultPorts[req.URL.Scheme] == "" || name == "" || net.ParseIP(name) != nil || e.proxied(req) {
		return e.base.RoundTrip(req)
	}
	h, err := e.hostFor(strings.ToLower(name)) // a name is case-insensitive
	switch {
	case err != nil:
		closeBody(req)
		return nil, err
	case h == nil:
		return e.base.RoundTrip(req) // beyond MaxHosts
	}
	ctx := req.Context()
	list, err := e.endpoints(ctx, h)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	n := uint64(len(list))
	if n == 0 { // not reached: a lookup without an address fails
		closeBody(req)
		return nil, fmt.Errorf("httpmw: Endpoints: resolving %q: %w", h.name, ErrNoAddresses)
	}
	// Each candidate takes a turn of its own: a skipped address's turn is
	// spent, not handed to its neighbour, which would get a double share.
	ep, pass, _ := endpoint.Pick(ctx, h.set, len(list), func() (*endpoint.Endpoint, *endpoint.Endpoint, error) {
		ep := list[(h.rr.Add(1)-1)%n]
		return ep, ep, nil
	})

	out := new(http.Request)
	*out = *req
	u := *req.URL
	u.Host = net.JoinHostPort(ep.Addr(), port)
	out.URL = &u
	if out.Host == "" {
		out.Host = req.URL.Host
	}
	base := e.base
	if u.Scheme == "https" {
		base = h.secure(e.base)
	}
	resp, err := base.RoundTrip(out)
	switch {
	case err != nil && ctx.Err() != nil:
		pass.Done(endpoint.Ended)
	case err != nil, resp.StatusCode >= 500 && resp.StatusCode <= 599:
		pass.Done(endpoint.Failed)
	default:
		pass.Done(endpoint.Answered)
	}
	if resp != nil {
		resp.Request = req
	}
	return resp, err
}

// defaultPorts are the ports of the schemes an Endpoints spreads.
var defaultPorts = map[string]string{"http": "80", "https": "443"}

// proxied reports whether the base would send req through a proxy.
func (e *Endpoints) proxied(req *http.Request) bool {
	if e.base.Proxy == nil {
		return false
	}
	u, err := e.base.Proxy(req)
	return u != nil || err != nil
}

// secure returns the host's transport for https: a clone of base whose TLS
// ServerName is the host's name, made on first use.
func (h *host) secure(base *http.Transport) *http.Transport {
	if t := h.tls.Load(); t != nil {
		return t
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.tls.Load(); t != nil {
		return t
	}
	t := base.Clone()
	if t.TLSClientConfig == nil {
		t.TLSClientConfig = &tls.Config{}
	}
	if t.TLSClientConfig.ServerName == "" {
		t.TLSClientConfig.ServerName = h.name
	}
	h.tls.Store(t)
	return t
}

// Statuses returns the state of every host's endpoints, by host, then by
// address.
func (e *Endpoints) Statuses() []endpoint.Status {
	if e == nil {
		return nil
	}
	hosts := e.kept()
	slices.SortFunc(hosts, func(a, b *host) int { return strings.Compare(a.name, b.name) })
	var out []endpoint.Status
	for _, h := range hosts {
		out = append(out, h.set.Statuses()...)
	}
	return out
}

func (e *Endpoints) kept() []*host {
	e.mu.Lock()
	defer e.mu.Unlock()
	hosts := make([]*host, 0, len(e.hosts))
	for _, h := range e.hosts {
		hosts = append(hosts, h)
	}
	return hosts
}

// CloseIdleConnections closes the idle connections of the base and of the
// hosts' https clones of it; http.Client.CloseIdleConnections calls it.
func (e *Endpoints) CloseIdleConnections() {
	if e == nil || e.base == nil {
		return
	}
	e.base.CloseIdleConnections()
	for _, h := range e.kept() {
		if t := h.tls.Load(); t != nil {
			t.CloseIdleConnections()
		}
	}
}
