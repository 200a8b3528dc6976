//go:build linux

package httpmw_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/endpoint"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/preset"
)

// TestEndpointsRetryGoesElsewhere: one address answers every request with
// a 503, after sending 9 requests of its own through the Endpoints, so
// that the turn comes back to it for the retry: 300 GETs through a chain
// over the Endpoints all succeed, and every request whose first attempt
// went to the failing address had its second at another, as the request's
// attempts tell the Endpoints. Through Standard (attempts with contexts of
// their own, an attempt timeout's), and through a chain of a retry alone
// (attempts in the request's context).
func TestEndpointsRetryGoesElsewhere(t *testing.T) {
	for _, tc := range []struct {
		name  string
		above func(*httpmw.Endpoints) http.RoundTripper
	}{
		{"Standard", func(eps *httpmw.Endpoints) http.RoundTripper {
			return must(httpmw.Standard(eps, preset.Settings{Backoff: time.Millisecond}))
		}},
		{"retry only", func(eps *httpmw.Endpoints) http.RoundTripper {
			return must(httpmw.New(eps, must(chain.New(noWait()))))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackends(t, false)
			const bad = 5
			b.answer[bad].Store(answer503)
			var lookups atomic.Int64
			eps := newEndpoints(t, endpoint.Settings{}, httpmw.Resolver(fixed(b.addrs, &lookups)))
			nine := func() { send(t, eps, b.url(), 9, "", 0) }
			b.before5.Store(&nine)
			if got := send(t, tc.above(eps), b.url(), 300, "r", 0); got[200] != 300 {
				t.Errorf("answers %v; want 300 200s", got)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			retried := 0
			for id, servers := range b.seen {
				if len(servers) == 1 {
					continue
				}
				retried++
				if servers[0] != bad || slices.Contains(servers[1:], bad) || len(servers) > 2 {
					t.Errorf("request %s went to %v; want the failing %d, then one other", id, servers, bad)
				}
			}
			if retried < 5 {
				t.Errorf("%d requests retried; want at least the 5 that ejected the failing address", retried)
			}
			if ej := ejected(eps); len(ej) != 1 || ej[0].Endpoint != b.addrs[bad] {
				t.Errorf("ejected %+v; want %s", ej, b.addrs[bad])
			}
		})
	}
}

// TestEndpointsReresolve: the host's addresses change (127.0.0.2 leaves,
// 127.0.0.11 comes); once they are older than ResolveEvery (50 ms), a
// request looks them up again: the address that left gets no more
// requests, the one that came gets its share.
func TestEndpointsReresolve(t *testing.T) {
	t.Parallel()
	b := newBackends(t, false)
	var mu sync.Mutex
	addrs := b.addrs[:9]
	eps := newEndpoints(t, endpoint.Settings{}, httpmw.ResolveEvery(50*time.Millisecond),
		httpmw.Resolver(resolverFunc(func(context.Context, string) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			return addrs, nil
		})))
	send(t, eps, b.url(), 90, "", 0)
	if n := b.hits[9].Load(); n != 0 {
		t.Fatalf("%s, not resolved yet, got %d requests", b.addrs[9], n)
	}
	mu.Lock()
	addrs = b.addrs[1:]
	mu.Unlock()
	has := func(addr string) bool {
		return slices.ContainsFunc(eps.Statuses(), func(s endpoint.Status) bool { return s.Endpoint == addr })
	}
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && !has(b.addrs[9]); {
		time.Sleep(10 * time.Millisecond)
		send(t, eps, b.url(), 1, "", 0)
	}
	if !has(b.addrs[9]) || has(b.addrs[0]) {
		t.Fatalf("statuses %+v; want %s in, %s out", eps.Statuses(), b.addrs[9], b.addrs[0])
	}
	before := b.counts()
	if got := send(t, eps, b.url(), 100, "", 0); got[200] != 100 {
		t.Errorf("answers %v; want 100 200s", got)
	}
	if after := since(b.counts(), before); after[0] != 0 || after[9] < 5 {
		t.Errorf("of 100 requests after the change, %d went to %s (gone) and %d to %s (new); want 0 and about 11", after[0], b.addrs[0], after[9], b.addrs[9])
	}
}

// TestEndpointsOneLookupAtATime: while one request looks the host up again
// (its lookup held), 50 others go on with the old addresses without
// looking it up; nothing looks it up in the background.
func TestEndpointsOneLookupAtATime(t *testing.T) {
	t.Parallel()
	b := newBackends(t, false)
	var lookups atomic.Int64
	var hold atomic.Bool // the next lookup waits for release
	entered, release := make(chan struct{}), make(chan struct{})
	eps := newEndpoints(t, endpoint.Settings{}, httpmw.ResolveEvery(20*time.Millisecond),
		httpmw.Resolver(resolverFunc(func(ctx context.Context, _ string) ([]string, error) {
			lookups.Add(1)
			if hold.CompareAndSwap(true, false) {
				close(entered)
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return b.addrs, nil
		})))
	send(t, eps, b.url(), 10, "", 0)
	time.Sleep(30 * time.Millisecond) // the addresses are due for a lookup
	before := lookups.Load()
	hold.Store(true)
	done := make(chan map[int]int)
	go func() { done <- send(t, eps, b.url(), 1, "", 0) }()
	<-entered
	got := send(t, eps, b.url(), 50, "", 0)
	n := lookups.Load() - before
	close(release)
	if slow := <-done; slow[200] != 1 || got[200] != 50 || n != 1 {
		t.Errorf("during the lookup: %v and %d lookups, then %v; want 50 200s, 1 lookup, then a 200", got, n, slow)
	}
	time.Sleep(30 * time.Millisecond)
	if n := lookups.Load() - before; n != 1 {
		t.Errorf("%d lookups with no request; want 1", n)
	}
}

// TestEndpointsLookupErrors: a host's first lookup that fails fails its
// request with the lookup's error (a resolver's error, no address, the
// request's deadline), and the next request looks it up again; a lookup
// that fails once the host has addresses keeps them.
func TestEndpointsLookupErrors(t *testing.T) {
	b := newBackends(t, false)
	var fail atomic.Int32 // 1: a DNS error, 2: no address, 3: until the context ends
	var lookups atomic.Int64
	eps := newEndpoints(t, endpoint.Settings{}, httpmw.ResolveEvery(time.Millisecond),
		httpmw.Resolver(resolverFunc(func(ctx context.Context, host string) ([]string, error) {
			lookups.Add(1)
			switch fail.Load() {
			case 1:
				return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
			case 2:
				return nil, nil
			case 3:
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return b.addrs, nil
		})))
	client := &http.Client{Transport: eps}
	fail.Store(1)
	_, err := client.Get(b.url())
	if dns := (*net.DNSError)(nil); !errors.As(err, &dns) || !strings.Contains(err.Error(), `resolving "backends.test"`) {
		t.Errorf("a failed lookup: %v; want its *net.DNSError, naming the host", err)
	}
	fail.Store(2)
	if _, err := client.Get(b.url()); !errors.Is(err, httpmw.ErrNoAddresses) {
		t.Errorf("a lookup with no address: %v; want ErrNoAddresses", err)
	}
	fail.Store(3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := client.Do(must(http.NewRequestWithContext(ctx, http.MethodGet, b.url(), nil))); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a lookup past the request's deadline: %v; want DeadlineExceeded", err)
	}
	fail.Store(0)
	if got := send(t, eps, b.url(), 10, "", 0); got[200] != 10 {
		t.Errorf("once the lookup succeeds: %v; want 10 200s", got)
	}
	fail.Store(1)
	n := lookups.Load()
	time.Sleep(2 * time.Millisecond)
	if got := send(t, eps, b.url(), 20, "", 0); got[200] != 20 || lookups.Load() == n || len(eps.Statuses()) != 10 {
		t.Errorf("with lookups failing again: %v, %d lookups, %d endpoints; want 20 200s, lookups, the ten kept", got, lookups.Load()-n, len(eps.Statuses()))
	}
}

// TestEndpointsTLSServerName: an https host resolved to 127.0.0.2, whose
// certificate is for example.com (and 127.0.0.1, not 127.0.0.2): the
// request goes to the address, and the certificate is verified for the
// host's name, sent as its SNI and Host.
func TestEndpointsTLSServerName(t *testing.T) {
	var sni, hostHeader atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sni.Store(r.TLS.ServerName)
		hostHeader.Store(r.Host)
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake that fails on purpose
	srv.Listener.Close()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no loopback address 127.0.0.2: %v", err)
	}
	srv.Listener = l
	srv.StartTLS()
	defer srv.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	base := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	defer base.CloseIdleConnections()
	if _, err := (&http.Client{Transport: base}).Get("https://127.0.0.2:" + port + "/"); err == nil {
		t.Fatal("the certificate verified for 127.0.0.2: the test would not see the name used")
	}
	eps := must(httpmw.NewEndpoints(base, endpoint.Settings{}, httpmw.Resolver(resolverFunc(func(context.Context, string) ([]string, error) {
		return []string{"127.0.0.2"}, nil
	}))))
	defer eps.CloseIdleConnections()
	url := "https://example.com:" + port + "/"
	resp, err := (&http.Client{Transport: eps}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || sni.Load() != "example.com" || hostHeader.Load() != "example.com:"+port || resp.Request.URL.String() != url {
		t.Errorf("%d, SNI %v, Host %v, request %v; want 200, example.com, example.com:%s, %s", resp.StatusCode, sni.Load(), hostHeader.Load(), resp.Request.URL, port, url)
	}
	if base.TLSClientConfig.ServerName != "" {
		t.Errorf("the base's TLS config was changed: ServerName %q", base.TLSClientConfig.ServerName)
	}
}

// TestEndpointsPassThrough: a host that is an IP literal goes to the base
// as it is, without a lookup or a set; the caller's request is never
// modified, and is the response's Request.
func TestEndpointsPassThrough(t *testing.T) {
	b := newBackends(t, false)
	var lookups atomic.Int64
	eps := newEndpoints(t, endpoint.Settings{}, httpmw.Resolver(fixed(b.addrs, &lookups)))
	for _, url := range []string{"http://" + net.JoinHostPort(b.addrs[3], b.port) + "/", b.url()} {
		req := must(http.NewRequest(http.MethodGet, url, nil))
		host := req.Host
		resp, err := eps.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Request != req || req.URL.String() != url || req.Host != host {
			t.Errorf("%s: %d, request %p (sent %p) for %v, Host %q; want 200, the request as it was", url, resp.StatusCode, resp.Request, req, req.URL, req.Host)
		}
		if n := len(eps.Statuses()); lookups.Load() == 0 && n != 0 {
			t.Errorf("an IP literal's request made %d endpoints", n)
		}
	}
	if c := b.counts(); c[3] != 1 || lookups.Load() != 1 || b.badHost.Load() != 1 {
		t.Errorf("requests %v, %d lookups, %d with another Host; want the IP literal's at %s, 1 lookup (the name's), 1", c, lookups.Load(), b.badHost.Load(), b.addrs[3])
	}
}
