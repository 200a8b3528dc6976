package httpmw_test

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"github.com/sony/gobreaker/v2"
)

// The keyed set at scale: many hosts, against an in-memory base that
// answers by host, so that nothing but the set's own work is measured.

// byHost answers 503 to hosts starting with "down", 200 to the others, and
// counts the requests each gets.
type byHost struct{ down, up atomic.Int64 }

func (h *byHost) RoundTrip(r *http.Request) (*http.Response, error) {
	status := 200
	if strings.HasPrefix(r.URL.Host, "down") {
		status = 503
		h.down.Add(1)
	} else {
		h.up.Add(1)
	}
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// perHost is a transport keeping a chain per host, at most max: retry(3,
// no wait) → breaker(5 consecutive failures, open an hour).
func perHost(t testing.TB, base http.RoundTripper, max int, opts ...httpmw.Option) *httpmw.Transport {
	r := must(retry.New(retry.MaxAttempts(3), retry.Constant(0)))
	build := func(host string) (*chain.Chain, error) {
		b, err := breaker.New(breaker.Settings{Name: host, ConsecutiveFailures: 5, OpenTimeout: time.Hour})
		if err != nil {
			return nil, err
		}
		return chain.New(r, b)
	}
	return must(httpmw.New(base, nil, append([]httpmw.Option{httpmw.PerHost(build, max)}, opts...)...))
}

func getHost(t testing.TB, tr http.RoundTripper, host string) {
	t.Helper()
	resp, err := tr.RoundTrip(must(http.NewRequest(http.MethodGet, "http://"+host+"/", nil)))
	if err == nil {
		_ = resp.Body.Close()
	}
}

// TestOpenHostNotForgotten: a host whose breaker is open keeps it, however
// many new hosts come between its requests (it was evicted and rebuilt
// closed: 305 requests reached it instead of 5, and its breaker never
// opened again); the hosts evicted instead are told and counted.
func TestOpenHostNotForgotten(t *testing.T) {
	base := &byHost{}
	var evicted atomic.Int64
	tr := perHost(t, base, 10, httpmw.OnEvict(func(string) { evicted.Add(1) }))
	for round := range 100 {
		getHost(t, tr, "down.test")
		for i := range 20 {
			getHost(t, tr, fmt.Sprintf("up%d-%d.test", round, i))
		}
	}
	st := tr.Keys()
	if base.down.Load() != 5 || st.Kept != 10 || st.Evicted != 100*20-9 || evicted.Load() != int64(st.Evicted) || st.Overflowed != 0 {
		t.Errorf("down.test got %d requests; keys %+v, %d evictions told; want 5 requests (the breaker's 5 failures), 10 kept, %d evicted, none overflowed",
			base.down.Load(), st, evicted.Load(), 100*20-9)
	}
}

// TestMoreFailingHostsThanTheBound: with more failing hosts than the set
// keeps, the hosts that find no room share the overflow chain, whose
// breaker trips (every request was 3 downstream calls, each through a
// chain built for it and dropped).
func TestMoreFailingHostsThanTheBound(t *testing.T) {
	base := &byHost{}
	tr := perHost(t, base, 10)
	const requests = 500
	for i := range requests {
		getHost(t, tr, fmt.Sprintf("down%d.test", i%50))
	}
	perRequest := float64(base.down.Load()) / requests
	st := tr.Keys()
	var overflowOpen bool
	for _, s := range tr.Breakers() {
		if s.Key == "(overflow)" && s.State == breaker.StateOpen {
			overflowOpen = true
		}
	}
	// 10 kept hosts × 5 failures, and 5 more for the overflow breaker.
	if base.down.Load() != 55 || !overflowOpen || st.Kept != 10 || st.Overflowed == 0 {
		t.Errorf("%d downstream requests (%.2f per request), keys %+v, overflow breaker open %t; want 55, the overflow breaker open",
			base.down.Load(), perRequest, st, overflowOpen)
	}
}

// BenchmarkKeys: the cost of a request, and the memory of a host's chain,
// from 10 to 100,000 hosts (b.N requests spread over them, every host
// made before the timer starts). The chain per host is what docs/http.md
// recommends at scale: a breaker of its own, the retry and the timeout
// shared. B/key is the heap the hosts' chains and the set's records take,
// per host. impl=one-chain sends the same requests through a single chain:
// what is left between the two is the keyed set's own cost, while both
// pay the cache misses of touching n hosts' requests (and, per host, n
// breakers) in turn.
func BenchmarkKeys(b *testing.B) {
	r := must(retry.New(retry.MaxAttempts(3)))
	attempt := must(timeout.New(time.Second, timeout.Latency(0.99, 200*time.Millisecond)))
	for _, rule := range []struct {
		name string
		s    breaker.Settings
	}{
		{"default", breaker.Settings{}},
		{"consecutive", breaker.Settings{ConsecutiveFailures: 5}},
		{"count-window", breaker.Settings{FailureRate: 0.5, WindowCalls: 100}},
	} {
		build := func(string) (*chain.Chain, error) {
			br, err := breaker.New(rule.s)
			if err != nil {
				return nil, err
			}
			return chain.New(r, br, attempt)
		}
		for _, n := range []int{10, 1000, 100000} {
			hosts := make([]string, n)
			for i := range hosts {
				hosts[i] = fmt.Sprintf("h%d.test", i)
			}
			for _, impl := range []string{"per-host", "one-chain"} {
				b.Run(fmt.Sprintf("rule=%s/keys=%d/impl=%s", rule.name, n, impl), func(b *testing.B) {
					base := &byHost{}
					var m0, m1 runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&m0)
					var tr *httpmw.Transport
					if impl == "per-host" {
						tr = must(httpmw.New(base, nil, httpmw.PerHost(build, n)))
					} else {
						tr = must(httpmw.New(base, must(build(""))))
					}
					for _, h := range hosts {
						getHost(b, tr, h)
					}
					runtime.GC()
					runtime.ReadMemStats(&m1)
					perKey := float64(m1.HeapAlloc-m0.HeapAlloc) / float64(n)
					reqs := make([]*http.Request, n)
					for i, h := range hosts {
						reqs[i] = must(http.NewRequest(http.MethodGet, "http://"+h+"/", nil))
					}
					i := 0
					for b.Loop() {
						resp, err := tr.RoundTrip(reqs[i])
						if err == nil {
							_ = resp.Body.Close()
						}
						if i++; i == n {
							i = 0
						}
					}
					if impl == "per-host" {
						b.ReportMetric(perKey, "B/key")
					}
					runtime.KeepAlive(tr)
				})
			}
		}
	}
}

// TestOpenBreakerHostNotForgottenPerEngine: a host whose breaker is open
// keeps its chain on every engine, a gobreaker adapted with
// breaker.FromGobreaker included (it read closed and clean, was evicted
// and rebuilt closed: 305 requests reached the host instead of 5), also
// when the adapted breaker's OnStateChange reads the transport's counts.
func TestOpenBreakerHostNotForgottenPerEngine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(tr **httpmw.Transport) func(host string) (*chain.Chain, error)
	}{
		{"native", func(**httpmw.Transport) func(string) (*chain.Chain, error) {
			return func(host string) (*chain.Chain, error) {
				return chain.New(must(breaker.New(breaker.Settings{Name: host, ConsecutiveFailures: 5, OpenTimeout: time.Hour})))
			}
		}},
		{"engine-gobreaker", func(**httpmw.Transport) func(string) (*chain.Chain, error) {
			return func(host string) (*chain.Chain, error) {
				return chain.New(must(breaker.New(breaker.Settings{Name: host, ConsecutiveFailures: 5, OpenTimeout: time.Hour, Engine: breaker.EngineGobreaker})))
			}
		}},
		{"from-gobreaker", func(**httpmw.Transport) func(string) (*chain.Chain, error) {
			return func(host string) (*chain.Chain, error) {
				return chain.New(must(breaker.FromGobreaker(gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{
					Name:        host,
					Timeout:     time.Hour,
					ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 },
				}))))
			}
		}},
		{"from-gobreaker-reading-the-transport", func(tr **httpmw.Transport) func(string) (*chain.Chain, error) {
			return func(host string) (*chain.Chain, error) {
				return chain.New(must(breaker.FromGobreaker(gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{
					Name:          host,
					Timeout:       time.Hour,
					ReadyToTrip:   func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 },
					OnStateChange: func(string, gobreaker.State, gobreaker.State) { _ = (*tr).Keys() },
				}))))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := &byHost{}
			var tr *httpmw.Transport
			tr = must(httpmw.New(base, nil, httpmw.PerHost(tc.build(&tr), 10)))
			for round := range 100 {
				getHost(t, tr, "down.test")
				for i := range 20 {
					getHost(t, tr, fmt.Sprintf("up%d-%d.test", round, i))
				}
			}
			st := tr.Keys()
			if got := base.down.Load(); got != 5 || st.Kept != 10 || st.Evicted != 100*20-9 {
				t.Errorf("down.test got %d requests; keys %+v; want 5 requests (the breaker's 5 failures), 10 kept, %d evicted",
					got, st, 100*20-9)
			}
		})
	}
}
