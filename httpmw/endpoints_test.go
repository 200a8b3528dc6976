package httpmw_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/endpoint"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/internal/attempt"
	"github.com/callguard/callguard/timeout"
)

// loopback resolves every host to 127.0.0.1.
type loopback struct{}

func (loopback) LookupHost(context.Context, string) ([]string, error) {
	return []string{"127.0.0.1"}, nil
}

// TestEndpointsSettingsErrors: an invalid setting or option is an error of
// NewEndpoints, by name.
func TestEndpointsSettingsErrors(t *testing.T) {
	for _, tc := range []struct {
		s     endpoint.Settings
		opts  []httpmw.EndpointsOption
		field string // the endpoint.Error's Field, or a part of the message
	}{
		{s: endpoint.Settings{MaxEjectionPercent: 101}, field: "MaxEjectionPercent"},
		{s: endpoint.Settings{SlowFactor: 0.5}, field: "SlowFactor"},
		{s: endpoint.Settings{Breaker: breaker.Settings{Engine: breaker.EngineGobreaker}}, field: "Breaker.Engine"},
		{opts: []httpmw.EndpointsOption{httpmw.Resolver(nil)}, field: "Resolver(nil)"},
		{opts: []httpmw.EndpointsOption{httpmw.ResolveEvery(0)}, field: "ResolveEvery(0)"},
		{opts: []httpmw.EndpointsOption{httpmw.MaxHosts(0)}, field: "MaxHosts(0)"},
		{opts: []httpmw.EndpointsOption{nil}, field: "nil Option"},
	} {
		_, err := httpmw.NewEndpoints(nil, tc.s, tc.opts...)
		var se *endpoint.Error
		switch {
		case err == nil:
			t.Errorf("%s: no error", tc.field)
		case !strings.HasPrefix(err.Error(), "httpmw: NewEndpoints: "):
			t.Errorf("%s: %v; want it to start with httpmw: NewEndpoints:", tc.field, err)
		case errors.As(err, &se) && se.Field != tc.field, se == nil && !strings.Contains(err.Error(), tc.field):
			t.Errorf("%v; want it to name %s", err, tc.field)
		}
	}
	if eps, err := httpmw.NewEndpoints(nil, endpoint.Settings{}, httpmw.ResolveEvery(-1), httpmw.MaxHosts(1)); err != nil || eps == nil {
		t.Errorf("valid settings: %v", err)
	}
	var zero httpmw.Endpoints
	if _, err := zero.RoundTrip(must(http.NewRequest(http.MethodGet, "http://x.test/", nil))); err == nil {
		t.Error("a zero Endpoints sent a request")
	}
}

// TestEndpointsMaxHosts: beyond MaxHosts names, a new host's requests go
// to the base as they are (its dialer sees the name, not an address).
func TestEndpointsMaxHosts(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Host)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	var mu sync.Mutex
	var dialed []string
	base := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, addr)
		mu.Unlock()
		return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
	}}
	eps := must(httpmw.NewEndpoints(base, endpoint.Settings{}, httpmw.Resolver(loopback{}), httpmw.MaxHosts(1)))
	defer eps.CloseIdleConnections()
	client := &http.Client{Transport: eps}
	for _, h := range []string{"one.test", "two.test"} {
		resp, err := client.Get("http://" + net.JoinHostPort(h, port) + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != net.JoinHostPort(h, port) {
			t.Errorf("%s: the server saw Host %q", h, body)
		}
	}
	st := eps.Statuses()
	if want := []string{"127.0.0.1:" + port, "two.test:" + port}; len(dialed) != 2 || dialed[0] != want[0] || dialed[1] != want[1] || len(st) != 1 || st[0].Service != "one.test" {
		t.Errorf("dialed %v, statuses %+v; want %v and one.test's endpoint", dialed, st, want)
	}
}

// TestEndpointsPoolWait is TestPoolWaitIsNotAFailure through an Endpoints
// over the base with one connection (per address): a Transport over it
// still judges the waits for the pool's connection, the client's (neutral
// to its breaker, which stays closed).
func TestEndpointsPoolWait(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(30 * time.Millisecond):
			_, _ = io.WriteString(w, "ok")
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	u := must(url.Parse(srv.URL))
	u.Host = net.JoinHostPort("pool.test", u.Port())
	eps := must(httpmw.NewEndpoints(&http.Transport{MaxConnsPerHost: 1}, endpoint.Settings{}, httpmw.Resolver(loopback{})))
	defer eps.CloseIdleConnections()
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 5}))
	client := &http.Client{Transport: must(httpmw.New(eps, must(chain.New(b, must(timeout.New(50*time.Millisecond))))))}
	var mu sync.Mutex
	var ok, queued, rejected, other int
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			resp, err := client.Get(u.String())
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.As(err, new(*attempt.Queued)):
				queued++
			case errors.Is(err, breaker.ErrOpen):
				rejected++
			default:
				other++
			}
		})
	}
	wg.Wait()
	if rejected != 0 || b.State() != breaker.StateClosed || ok == 0 || queued == 0 {
		t.Errorf("%d answered, %d cut in the pool, %d rejected by the breaker, %d other, breaker %v; want none rejected and it closed", ok, queued, rejected, other, b.State())
	}
}
