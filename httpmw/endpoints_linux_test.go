//go:build linux

package httpmw_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/endpoint"
	"github.com/callguard/callguard/httpmw"
)

// Linux routes all of 127.0.0.0/8 to the loopback interface: the ten
// backends of these tests listen on 127.0.0.2 … 127.0.0.11, on one port,
// and a resolver of the test's own gives them as the addresses of
// backendsHost.
const backendsHost = "backends.test"

// The backends' answers.
const (
	answerOK   int32 = iota
	answer503        // 503 Service Unavailable
	answerHang       // nothing, until the request's context or the test ends
)

type backends struct {
	port    string
	addrs   []string // 127.0.0.2 … 127.0.0.11
	hits    [10]atomic.Int64
	answer  [10]atomic.Int32
	badHost atomic.Int64           // requests whose Host header was not backendsHost's
	before5 atomic.Pointer[func()] // if set, runs before each 503
	done    chan struct{}

	mu   sync.Mutex
	seen map[string][]int // the servers each X-Req went to, in order
}

// newBackends starts the ten backends (over TLS with tlsOn), closed at the
// end of the test.
func newBackends(t *testing.T, tlsOn bool) *backends {
	t.Helper()
	b := &backends{done: make(chan struct{}), seen: map[string][]int{}}
	var ls []net.Listener
	b.port, ls = listenTen(t)
	for i, l := range ls {
		b.addrs = append(b.addrs, l.Addr().(*net.TCPAddr).IP.String())
		srv := httptest.NewUnstartedServer(b.handler(i))
		srv.Listener.Close()
		srv.Listener = l
		if tlsOn {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
	}
	t.Cleanup(func() { close(b.done) }) // before the servers close: hanging handlers return
	return b
}

// listenTen listens on 127.0.0.2 … 127.0.0.11 on one port, another port
// if one of them is taken.
func listenTen(t *testing.T) (string, []net.Listener) {
	t.Helper()
	for range 20 {
		l0, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Skipf("no loopback address 127.0.0.2: %v", err)
		}
		port := strconv.Itoa(l0.Addr().(*net.TCPAddr).Port)
		ls := []net.Listener{l0}
		for i := 3; i <= 11; i++ {
			l, err := net.Listen("tcp", net.JoinHostPort(fmt.Sprintf("127.0.0.%d", i), port))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		if len(ls) == 10 {
			return port, ls
		}
		for _, l := range ls {
			l.Close()
		}
	}
	t.Fatal("no port free on all of 127.0.0.2 … 127.0.0.11 in 20 tries")
	return "", nil
}

func (b *backends) handler(i int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b.hits[i].Add(1)
		if id := r.Header.Get("X-Req"); id != "" {
			b.mu.Lock()
			b.seen[id] = append(b.seen[id], i)
			b.mu.Unlock()
		}
		if r.Host != net.JoinHostPort(backendsHost, b.port) {
			b.badHost.Add(1)
		}
		switch b.answer[i].Load() {
		case answer503:
			if fn := b.before5.Load(); fn != nil {
				(*fn)()
			}
			w.WriteHeader(http.StatusServiceUnavailable)
		case answerHang:
			select {
			case <-r.Context().Done():
			case <-b.done:
			}
		default:
			_, _ = io.WriteString(w, "ok")
		}
	}
}

func (b *backends) url() string { return "http://" + net.JoinHostPort(backendsHost, b.port) + "/" }

// counts returns each backend's requests so far.
func (b *backends) counts() [10]int64 {
	var c [10]int64
	for i := range c {
		c[i] = b.hits[i].Load()
	}
	return c
}

func since(now, before [10]int64) [10]int64 {
	for i := range now {
		now[i] -= before[i]
	}
	return now
}

// resolverFunc is a resolver of the test's own.
type resolverFunc func(ctx context.Context, host string) ([]string, error)

func (f resolverFunc) LookupHost(ctx context.Context, host string) ([]string, error) {
	return f(ctx, host)
}

// fixed resolves backendsHost to addrs, and counts its lookups.
func fixed(addrs []string, lookups *atomic.Int64) resolverFunc {
	return func(_ context.Context, host string) ([]string, error) {
		lookups.Add(1)
		if host != backendsHost {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return addrs, nil
	}
}

// newEndpoints returns an Endpoints over a base of its own (its idle
// connections closed at the end of the test).
func newEndpoints(t *testing.T, s endpoint.Settings, opts ...httpmw.EndpointsOption) *httpmw.Endpoints {
	t.Helper()
	eps := must(httpmw.NewEndpoints(&http.Transport{MaxIdleConnsPerHost: 4}, s, opts...))
	t.Cleanup(eps.CloseIdleConnections)
	return eps
}

// send makes n GETs to url one after another, each marked X-Req (prefix
// and its number, unless prefix is "") and bounded by timeout (none if 0), and returns how many
// got each status (0: an error).
func send(t *testing.T, rt http.RoundTripper, url string, n int, prefix string, timeout time.Duration) map[int]int {
	t.Helper()
	client := &http.Client{Transport: rt}
	got := map[int]int{}
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		if timeout > 0 {
			ctx, cancel = context.WithTimeout(context.Background(), timeout)
		}
		req := must(http.NewRequestWithContext(ctx, http.MethodGet, url, nil))
		if prefix != "" {
			req.Header.Set("X-Req", prefix+strconv.Itoa(i))
		}
		resp, err := client.Do(req)
		if err != nil {
			got[0]++
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got[resp.StatusCode]++
		}
		cancel()
	}
	return got
}

// ejected returns the statuses of the ejected endpoints.
func ejected(eps *httpmw.Endpoints) []endpoint.Status {
	var out []endpoint.Status
	for _, s := range eps.Statuses() {
		if s.Ejected {
			out = append(out, s)
		}
	}
	return out
}

// TestEndpointsSpread: 1,000 GETs one after another land on the ten
// addresses in turn, 100 each, with the Host header kept.
func TestEndpointsSpread(t *testing.T) {
	b := newBackends(t, false)
	var lookups atomic.Int64
	eps := newEndpoints(t, endpoint.Settings{}, httpmw.Resolver(fixed(b.addrs, &lookups)))
	if got := send(t, eps, b.url(), 1000, "", 0); got[200] != 1000 {
		t.Fatalf("answers %v; want 1,000 200s", got)
	}
	for i, n := range b.counts() {
		if n < 95 || n > 105 {
			t.Errorf("%s: %d requests; want 100 ± 5 (all: %v)", b.addrs[i], n, b.counts())
		}
	}
	st := eps.Statuses()
	if len(st) != 10 || st[0].Service != backendsHost || st[0].Endpoint != "127.0.0.10" || st[9].Endpoint != "127.0.0.9" {
		t.Errorf("statuses %+v; want ten of %s, by address", st, backendsHost)
	}
	if lookups.Load() != 1 || b.badHost.Load() != 0 {
		t.Errorf("%d lookups, %d requests with another Host; want 1 and 0", lookups.Load(), b.badHost.Load())
	}
}

// TestEndpointsEjectFailing: one address answers every request with a
// 503. It is ejected after its breaker's 5 failures (within the first 50
// requests in turn), and gets no more of the next 500 (its ejection
// lasting the test); the nine others answer every request and none is
// ejected or capped.
func TestEndpointsEjectFailing(t *testing.T) {
	b := newBackends(t, false)
	const bad = 4
	b.answer[bad].Store(answer503)
	var lookups atomic.Int64
	eps := newEndpoints(t, longEjection(), httpmw.Resolver(fixed(b.addrs, &lookups)))
	first := send(t, eps, b.url(), 100, "", 0)
	before := b.counts()
	rest := send(t, eps, b.url(), 500, "", 0)
	after := since(b.counts(), before)
	// 5 % of its fair share of the 500 (50) is 2.5.
	if after[bad] > 2 || rest[503] != int(after[bad]) || rest[200] != 500-int(after[bad]) {
		t.Errorf("after the first 100 requests (%v), the failing address got %d of 500 (%v); want at most 2", first, after[bad], rest)
	}
	// The ejected address's turns are spent, not handed to its neighbour:
	// each healthy one gets about a ninth.
	for i, n := range after {
		if i != bad && (n < 45 || n > 66) {
			t.Errorf("healthy address %d got %d of 500 (%v); want about 500 / 9", i, n, after)
		}
	}
	for _, s := range eps.Statuses() {
		if isBad := s.Endpoint == b.addrs[bad]; s.Ejected != isBad || !isBad && (s.Ejections != 0 || s.Capped != 0) {
			t.Errorf("%+v; want only %s ejected", s, b.addrs[bad])
		}
	}
}

// longEjection is the settings of a set whose ejections last the test.
func longEjection() endpoint.Settings {
	var s endpoint.Settings
	s.Breaker.OpenTimeout = time.Minute
	return s
}

// statusOf returns the status of the endpoint at addr.
func statusOf(t *testing.T, eps *httpmw.Endpoints, addr string) endpoint.Status {
	t.Helper()
	for _, s := range eps.Statuses() {
		if s.Endpoint == addr {
			return s
		}
	}
	t.Fatalf("no endpoint %s in %+v", addr, eps.Statuses())
	return endpoint.Status{}
}

// TestEndpointsEjectHanging: one address never answers; each request has
// a 300 ms deadline. Once the set knows the typical answer time, its
// requests ended by their deadline are hangs: it is ejected within the
// first 100 requests, and the next 100 (with 1 s deadlines, so that a
// loaded machine does not fail a healthy one) all succeed.
func TestEndpointsEjectHanging(t *testing.T) {
	t.Parallel()
	b := newBackends(t, false)
	const bad = 7
	b.answer[bad].Store(answerHang)
	var lookups atomic.Int64
	eps := newEndpoints(t, longEjection(), httpmw.Resolver(fixed(b.addrs, &lookups)))
	first := send(t, eps, b.url(), 100, "", 300*time.Millisecond)
	ej := ejected(eps)
	if len(ej) != 1 || ej[0].Endpoint != b.addrs[bad] {
		t.Fatalf("after 100 requests (%v): ejected %+v; want %s", first, ej, b.addrs[bad])
	}
	before := b.counts()
	if got := send(t, eps, b.url(), 100, "", time.Second); got[200] != 100 {
		t.Errorf("after the ejection: %v; want 100 200s", got)
	}
	if n := since(b.counts(), before)[bad]; n != 0 {
		t.Errorf("the ejected address got %d requests", n)
	}
}

// TestEndpointsReadmit: a failing address is ejected, heals, and is
// readmitted through its probes: within 2 s it has traffic again, and its
// status counts the readmission.
func TestEndpointsReadmit(t *testing.T) {
	t.Parallel()
	b := newBackends(t, false)
	const bad = 0
	b.answer[bad].Store(answer503)
	var lookups atomic.Int64
	s := endpoint.Settings{}
	s.Breaker.OpenTimeout = 30 * time.Millisecond
	eps := newEndpoints(t, s, httpmw.Resolver(fixed(b.addrs, &lookups)))
	send(t, eps, b.url(), 60, "", 0)
	if ej := ejected(eps); len(ej) != 1 || ej[0].Endpoint != b.addrs[bad] {
		t.Fatalf("ejected %+v; want %s", ej, b.addrs[bad])
	}
	b.answer[bad].Store(answerOK)
	var st endpoint.Status
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		send(t, eps, b.url(), 10, "", 0)
		if st = statusOf(t, eps, b.addrs[bad]); st.Readmissions > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st.Readmissions == 0 || st.Ejected {
		t.Fatalf("status %+v; want %s readmitted", st, b.addrs[bad])
	}
	before := b.counts()
	if got := send(t, eps, b.url(), 100, "", 0); got[200] != 100 {
		t.Errorf("after the readmission: %v; want 100 200s", got)
	}
	if n := since(b.counts(), before)[bad]; n < 5 {
		t.Errorf("the readmitted address got %d of 100 requests; want its share (about 10)", n)
	}
}

// TestEndpointsCap: all ten addresses fail every request. At most one of
// ten (MaxEjectionPercent 10) is ejected at any time, the others' breakers
// opening beyond it are capped, and the nine left keep getting requests.
func TestEndpointsCap(t *testing.T) {
	b := newBackends(t, false)
	for i := range b.answer {
		b.answer[i].Store(answer503)
	}
	var lookups atomic.Int64
	eps := newEndpoints(t, longEjection(), httpmw.Resolver(fixed(b.addrs, &lookups)))
	for i := range 200 {
		send(t, eps, b.url(), 1, "", 0)
		if ej := ejected(eps); len(ej) > 1 {
			t.Fatalf("after request %d: %d ejected at once (%+v); want at most 1", i+1, len(ej), ej)
		}
	}
	before := b.counts()
	send(t, eps, b.url(), 100, "", 0)
	last := since(b.counts(), before)
	var capped uint64
	ej := ejected(eps)
	for i, addr := range b.addrs {
		s := statusOf(t, eps, addr)
		capped += s.Capped
		if n := last[i]; !s.Ejected && n < 5 {
			t.Errorf("%s, not ejected, got %d of the last 100 requests (%v)", s.Endpoint, n, last)
		}
	}
	if len(ej) != 1 || capped == 0 {
		t.Errorf("ejected %+v, %d openings capped; want 1 ejected, the others capped", ej, capped)
	}
}
