package httpmw_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/endpoint"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/preset"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// An http.Client whose requests go through retry → breaker → attempt
// timeout.
func Example() {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // the first attempt fails
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	r, _ := retry.New(retry.MaxAttempts(3), retry.Exponential(10*time.Millisecond, time.Second))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	attempt, _ := timeout.New(2 * time.Second)
	c, _ := chain.New(r, b, attempt)

	tr, err := httpmw.New(http.DefaultTransport, c)
	if err != nil {
		panic(err) // an invalid option, by name
	}
	client := &http.Client{Transport: tr}
	resp, err := client.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), calls)
	// Output: 200 hello 2
}

// A fallback in the chain answers a request that failed, with a response
// of its own.
func ExampleRespond() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	stale, _ := fallback.New(func(ctx context.Context, err error) error {
		return httpmw.Respond(ctx, &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("stale"))})
	}, fallback.OnAnyFailure())
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	c, _ := chain.New(stale, b)
	tr, _ := httpmw.New(nil, c)

	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	// Output: 200 stale
}

// The one-call setup: callguard's recommended chain, one per host.
func ExampleStandard() {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // the first attempt fails
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	tr, err := httpmw.Standard(http.DefaultTransport, preset.Settings{Backoff: 10 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: tr}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body), "after", calls, "attempts;", len(tr.Breakers()), "host's chain")
	// Output: 200 hello after 2 attempts; 1 host's chain
}

// staticResolver resolves the host names it maps to their addresses.
type staticResolver map[string][]string

func (r staticResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	if addrs, ok := r[host]; ok {
		return addrs, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// Requests for a host name spread over the addresses it resolves to, each
// with a breaker of its own, under the recommended chain: a failing
// address is ejected and a retry goes to another.
func ExampleEndpoints() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.Host)
		fmt.Fprint(w, "hello from ", host) // the Host header keeps the name
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	// Here api.internal resolves to the test server's address; without
	// the Resolver option, net.DefaultResolver looks hosts up. A nil base
	// is a clone of http.DefaultTransport.
	eps, err := httpmw.NewEndpoints(&http.Transport{}, endpoint.Settings{},
		httpmw.Resolver(staticResolver{"api.internal": {"127.0.0.1"}}))
	if err != nil {
		fmt.Println(err) // an invalid setting, by name
		return
	}
	tr, err := httpmw.Standard(eps, preset.Settings{})
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://api.internal:" + port + "/")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body))
	for _, s := range eps.Statuses() {
		fmt.Println(s.Service, s.Endpoint, s.State, "ejected:", s.Ejected)
	}
	// Output:
	// 200 hello from api.internal
	// api.internal 127.0.0.1 closed ejected: false
}
