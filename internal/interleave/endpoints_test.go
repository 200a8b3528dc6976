package interleave

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/endpoint"
	"github.com/callguard/callguard/grpcmw"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/test/bufconn"
)

// epCase is how a gRPC case in a bubble dials through the
// callguard_endpoints policy: n endpoints with fake addresses ("ep-0",
// "ep-1", …) from a manual resolver, each a bufconn listener of its own
// that the case's one server serves, with the drawn settings.
type epCase struct {
	n      int
	s      endpoint.Settings // without OnChange, which the case's watch is
	option bool              // grpcmw.Endpoints(h) (else h.DialOption() beside the interceptors)
	// warm: the channel connects every endpoint before the calls (so that
	// each is a candidate of every pick: invariant 8 is decidable)
	warm bool
	// sick: the endpoints ep-0 to ep-(sick-1) answer every attempt
	// Unavailable, after its drawn delay
	sick int

	h *grpcmw.EndpointHealth
	w *epWatch
}

// drawEndpoints draws, for a third of the gRPC cases in a bubble, the
// endpoint policy and its settings. The draws come from a source of their
// own, seeded from the seed, so that a case's other draws are what they
// were before the policy was drawn.
func (cs *kase) drawEndpoints() {
	if cs.mode != modeGRPC || cs.real {
		return
	}
	r := rand.New(rand.NewPCG(cs.seed, 0xe9d))
	if r.IntN(3) != 0 {
		return
	}
	ep := &epCase{n: 2 + r.IntN(3)}
	b := breaker.Settings{ConsecutiveFailures: pick(r, 1, 1, 2, 2, 3, 4, 5)}
	if r.IntN(3) > 0 {
		// around the case's own timings: its timeouts, hedge delays and
		// the downstream's delays
		b.OpenTimeout = max(pick(r, cs.delays()...), tick)
	} else {
		b.OpenTimeout = time.Duration(pick(r, 50, 200)) * tick
	}
	if r.IntN(4) == 0 {
		b.MaxOpenTimeout = 4 * b.OpenTimeout
	}
	if r.IntN(3) == 0 {
		b.HalfOpenProbes = 1 + r.IntN(2) // as many successes as probes
	}
	ep.s = endpoint.Settings{Breaker: b, MaxEjectionPercent: pick(r, 10, 50, 100)}
	if r.IntN(3) == 0 {
		ep.s.SlowFactor = -1
	} else if r.IntN(2) == 0 {
		ep.s.SlowMargin = 2 * tick // the judgement within the cases' milliseconds
	}
	ep.option = r.IntN(2) == 0
	ep.warm = r.IntN(4) > 0
	if r.IntN(3) > 0 {
		ep.sick = 1 + r.IntN(ep.n)
	}
	if r.IntN(2) == 0 {
		// more calls, so that endpoints fail in a row, are ejected and
		// meet the cap
		cs.drawCalls(r, 4+r.IntN(5))
	}
	cs.eps = ep
}

// stay is the longest open stay of an endpoint's breaker.
func (ep *epCase) stay() time.Duration {
	return max(ep.s.Breaker.OpenTimeout, ep.s.Breaker.MaxOpenTimeout)
}

// maxEjected is the cap of endpoint.Settings: max(1, n·pct/100) of n ≥ 2.
func (ep *epCase) maxEjected() int {
	if ep.n < 2 {
		return 0
	}
	return max(1, ep.n*ep.s.MaxEjectionPercent/100)
}

func (ep *epCase) String() string {
	b := ep.s.Breaker
	probes := "default"
	if b.HalfOpenProbes > 0 {
		probes = strconv.Itoa(b.HalfOpenProbes)
	}
	slow := "default"
	switch {
	case ep.s.SlowFactor < 0:
		slow = "off"
	case ep.s.SlowMargin > 0:
		slow = "margin " + ep.s.SlowMargin.String()
	}
	via := "DialOption"
	if ep.option {
		via = "Endpoints"
	}
	var addrs []string
	for i := range ep.n {
		addrs = append(addrs, epAddr(i))
	}
	if ep.sick > 0 {
		addrs = append(addrs, fmt.Sprintf("%d sick", ep.sick))
	}
	return fmt.Sprintf("endpoints[%s via %s warm=%t: %d consecutive, open %v max %v, probes %s, cap %d%% (%d), slow %s]",
		strings.Join(addrs, ","), via, ep.warm, b.ConsecutiveFailures, b.OpenTimeout, b.MaxOpenTimeout, probes, ep.s.MaxEjectionPercent, ep.maxEjected(), slow)
}

func epAddr(i int) string { return "ep-" + strconv.Itoa(i) }

// epDial returns the dial options of the case's endpoints, each over a
// bufconn listener of its own, the listeners (for the server, which
// serves them all), and the interceptors' options that go with them. It
// makes the EndpointHealth and the watch of the case.
func (cs *kase) epDial() ([]grpc.DialOption, []grpcmw.Option, []net.Listener, error) {
	ep := cs.eps
	ep.w = &epWatch{n: ep.n, most: ep.maxEjected(), ejected: map[string]bool{}, told: map[string]*[3]uint64{}}
	s := ep.s
	s.OnChange = ep.w.onChange
	h, err := grpcmw.NewEndpointHealth(s)
	if err != nil {
		return nil, nil, nil, err
	}
	ep.h = h
	res := manual.NewBuilderWithScheme("interleave")
	var eps []resolver.Endpoint
	var lis []net.Listener
	bls := map[string]*bufconn.Listener{}
	for i := range ep.n {
		a := epAddr(i)
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
		bl := bufconn.Listen(1 << 20)
		bls[a] = bl
		lis = append(lis, epListener{bl, fakeAddr(a)})
	}
	res.InitialState(resolver.State{Endpoints: eps})
	var opts []grpcmw.Option
	// One dial at a time: a bufconn pipe starts with two timers set to
	// fire at once, and under -race the Go runtime (1.26) crashes now and
	// then when goroutines of one bubble fire such timers at the same time
	// (they share the bubble's race context unguarded).
	var dialing sync.Mutex
	dopts := []grpc.DialOption{
		grpc.WithResolvers(res),
		// each fake address to its listener; the connection knows its
		// address, which the peer of an attempt reports on both sides
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			bl := bls[addr]
			if bl == nil {
				return nil, fmt.Errorf("interleave: no endpoint %q", addr)
			}
			dialing.Lock()
			c, err := bl.DialContext(ctx)
			dialing.Unlock()
			if err != nil {
				return nil, err
			}
			return epConn{c, fakeAddr(addr)}, nil
		}),
		// innermost: one attempt of the interceptors' chain, and the
		// endpoint it went to
		grpc.WithChainUnaryInterceptor(ep.w.record),
	}
	if ep.option {
		opts = append(opts, grpcmw.Endpoints(h))
	} else {
		dopts = append(dopts, h.DialOption())
	}
	return dopts, opts, lis, nil
}

// epListener is an endpoint's listener: its connections know the
// endpoint, which the server's peer of a call reports.
type epListener struct {
	*bufconn.Listener
	addr fakeAddr
}

func (l epListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return epConn{c, l.addr}, nil
}

// sick reports whether the endpoint at addr fails every call (a drawn
// share of the endpoint cases has sick endpoints: ep-0 to ep-(sick-1)).
func (ep *epCase) isSick(addr string) bool {
	i, err := strconv.Atoi(strings.TrimPrefix(addr, "ep-"))
	return err == nil && strings.HasPrefix(addr, "ep-") && i < ep.sick
}

// fakeAddr is an endpoint's address as its connection reports it.
type fakeAddr string

func (a fakeAddr) Network() string { return "interleave" }
func (a fakeAddr) String() string  { return string(a) }

// epConn is a bufconn connection that knows the endpoint it was dialed for.
type epConn struct {
	net.Conn
	addr fakeAddr
}

func (c epConn) RemoteAddr() net.Addr { return c.addr }

// StreamingOutputCall answers at once, with no message: the picks of
// invariant 3 for endpoints (streams pass the interceptors' chain,
// UnaryOnly, and reach the endpoints' picker alone).
func (s *grpcServer) StreamingOutputCall(*testpb.StreamingOutputCallRequest, testpb.TestService_StreamingOutputCallServer) error {
	return nil
}

// epAttempt is one attempt of the chain, as the innermost interceptor saw
// it: the call, when it began and the endpoint it went to ("" if it got
// no stream: its pick is unknown).
type epAttempt struct {
	call  int
	start time.Time
	addr  string
}

// epWatch follows a case's endpoints: the ejections and readmissions told
// to OnChange, and the endpoint of each attempt.
type epWatch struct {
	n, most int // endpoints; how many may be ejected at once

	mu       sync.Mutex
	now      int                   // ejected now, as told
	peak     int                   // the most ejected at once, as told
	ejected  map[string]bool       // ejected now, as told
	told     map[string]*[3]uint64 // per endpoint: ejections, readmissions, cappings told
	over     *overCap              // more ejected than the cap, not yet settled
	first    time.Time             // the first ejection or capping told (zero: none)
	bad      []string              // invariant 7's violations
	attempts []epAttempt
	capped   int
}

// overCap is a moment more endpoints were ejected than the cap allows,
// as told. Tells of different endpoints come with no lock held, so that at
// one instant an ejection may be told before the readmission that made
// room for it: the excess counts once its instant is over (virtual time
// moved on, with every goroutine of the bubble blocked), or the case is.
type overCap struct {
	at  time.Time
	n   int
	eps []string
}

func (w *epWatch) onChange(c endpoint.Change) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.over != nil && now.After(w.over.at) {
		w.settle()
	}
	t := w.told[c.Endpoint]
	if t == nil {
		t = new([3]uint64)
		w.told[c.Endpoint] = t
	}
	switch {
	case c.Capped:
		t[2]++
		w.capped++
		if c.Ejected {
			w.bad = append(w.bad, fmt.Sprintf("%s: a change told both capped and ejected", c.Endpoint))
		}
	case c.Ejected:
		t[0]++
		if w.ejected[c.Endpoint] {
			w.bad = append(w.bad, fmt.Sprintf("%s: ejected again with no readmission told between", c.Endpoint))
		}
		w.ejected[c.Endpoint] = true
		w.now++
	default:
		t[1]++
		if !w.ejected[c.Endpoint] {
			w.bad = append(w.bad, fmt.Sprintf("%s: readmitted with no ejection told before", c.Endpoint))
		}
		w.ejected[c.Endpoint] = false
		w.now--
	}
	if (c.Capped || c.Ejected) && w.first.IsZero() {
		w.first = now
	}
	w.peak = max(w.peak, w.now)
	switch {
	case w.now <= w.most:
		w.over = nil // a readmission of the same instant made the room
	case w.over == nil || w.now > w.over.n:
		var eps []string
		for a, e := range w.ejected {
			if e {
				eps = append(eps, a)
			}
		}
		slices.Sort(eps)
		w.over = &overCap{at: now, n: w.now, eps: eps}
	}
}

// settle counts a pending excess as a violation; w.mu is held.
func (w *epWatch) settle() {
	if w.over == nil {
		return
	}
	w.bad = append(w.bad, fmt.Sprintf("%d endpoints ejected at once (%s), the cap allows %d of %d", w.over.n, strings.Join(w.over.eps, ","), w.most, w.n))
	w.over = nil
}

// record is the innermost unary interceptor: it notes each attempt's call
// and the endpoint its stream went to.
func (w *epWatch) record(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	call := -1
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		if v := md.Get("x-call"); len(v) == 1 {
			call, _ = strconv.Atoi(v[0])
		}
	}
	var p peer.Peer
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, append(opts[:len(opts):len(opts)], grpc.Peer(&p))...)
	a := epAttempt{call: call, start: start}
	if p.Addr != nil {
		a.addr = p.Addr.String()
	}
	w.mu.Lock()
	w.attempts = append(w.attempts, a)
	w.mu.Unlock()
	return err
}

// epBypass makes one pick of the channel outside the interceptors' chain:
// a stream, answered at once.
func epBypass(client testpb.TestServiceClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		return err
	}
	if _, err := st.Recv(); err != io.EOF {
		return fmt.Errorf("the stream ended with %v, want io.EOF", err)
	}
	return nil
}

// endpoints checks the invariants of a case's endpoints, once its calls
// returned (and, in a bubble, with nothing left running).
//
//   - 8: an attempt went to an endpoint its call had not tried while one
//     that admits it was left: checked where it is decidable (a warm
//     channel, where every endpoint is a candidate of every pick; before
//     any endpoint was ejected or capped, so that every one admits; the
//     endpoints of the call's earlier attempts known, and those of the
//     attempts begun at the same instant, whose picks may come first,
//     counted as maybe tried).
//   - 3: past the longest stay, no endpoint's breaker is open; picks
//     outside the chain then readmit every endpoint (no probe slot is
//     held by a call that has returned).
//   - 7: never more endpoints ejected at once than the cap, every
//     readmission after an ejection of its endpoint, and the ejections,
//     readmissions and cappings told the endpoints' own counts.
func (c *checker) endpoints(e *env) {
	ep := c.cs.eps
	w := ep.w
	c.elsewhere()

	time.Sleep(2*ep.stay() + time.Second)
	st := ep.h.Statuses()
	if len(st) != ep.n {
		c.fail(7, "%d endpoint statuses for %d endpoints: %+v", len(st), ep.n, st)
	}
	for _, s := range st {
		if s.State == breaker.StateOpen {
			c.fail(3, "endpoint %s: open %v after the calls returned, its longest stay is %v (%+v)", s.Endpoint, 2*ep.stay()+time.Second, ep.stay(), s)
		}
	}
	closed := func() bool {
		for _, s := range ep.h.Statuses() {
			if s.State != breaker.StateClosed || s.Ejected {
				return false
			}
		}
		return true
	}
	picks := 0
	for ; picks < 20*ep.n && !closed(); picks++ {
		if err := e.bypass(); err != nil {
			c.fail(3, "a pick outside the chain after the stays: %v", err)
			break
		}
	}
	if picks > 0 {
		stats.epReadmitted++
	}
	for _, s := range ep.h.Statuses() {
		if s.State != breaker.StateClosed || s.Ejected {
			c.fail(3, "endpoint %s: %v (ejected %t) after its stay and %d picks answered at once: a probe slot is held (%+v)", s.Endpoint, s.State, s.Ejected, picks, s.Counts)
		}
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	w.settle()
	for _, b := range w.bad {
		c.fail(7, "%s", b)
	}
	if w.now != 0 {
		c.fail(7, "%d endpoints ejected as told once every endpoint was readmitted", w.now)
	}
	for _, s := range ep.h.Statuses() {
		t := w.told[s.Endpoint]
		if t == nil {
			t = new([3]uint64)
		}
		if t[0] != s.Ejections || t[1] != s.Readmissions || t[2] != s.Capped {
			c.fail(7, "endpoint %s: told %d ejections, %d readmissions, %d cappings; it counts %d, %d, %d", s.Endpoint, t[0], t[1], t[2], s.Ejections, s.Readmissions, s.Capped)
		}
	}
	if w.peak > 0 {
		stats.epEjected++
	}
	if w.capped > 0 {
		stats.epCapped++
	}
	w.attempts = nil // the health stays registered in grpcmw: keep it small
}

// elsewhere: invariant 8 (see endpoints).
func (c *checker) elsewhere() {
	ep := c.cs.eps
	if !ep.warm {
		return
	}
	w := ep.w
	w.mu.Lock()
	as, first := slices.Clone(w.attempts), w.first
	w.mu.Unlock()
	for j, x := range as {
		if x.call < 0 || x.addr == "" || (!first.IsZero() && !x.start.Before(first)) {
			continue
		}
		tried, maybe := map[string]bool{}, map[string]bool{}
		decidable, earlier := true, false
		for i := range as {
			y := &as[i]
			if y.call != x.call || i == j {
				continue
			}
			switch {
			case y.start.Before(x.start):
				tried[y.addr], earlier = true, true
			case y.start.Equal(x.start):
				maybe[y.addr] = true
			default:
				continue
			}
			decidable = decidable && y.addr != ""
		}
		if !decidable || !earlier {
			continue
		}
		stats.epElsewhere++
		known := len(tried)
		for a := range maybe {
			if !tried[a] {
				known++
			}
		}
		if tried[x.addr] && known < ep.n {
			var ts []string
			for a := range tried {
				ts = append(ts, a)
			}
			slices.Sort(ts)
			c.fail(8, "call %d: an attempt at %v went back to %s, which its earlier attempts tried (%s), while %d of %d endpoints were untried and admitting (none ejected yet)",
				x.call, x.start.Sub(c.cs.origin), x.addr, strings.Join(ts, ","), ep.n-known, ep.n)
		}
	}
}
