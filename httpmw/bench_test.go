package httpmw_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// canned is a base RoundTripper that answers every request in memory with
// 200 "ok", so that BenchmarkTransport measures what the transport itself
// adds to a request; bench/ measures it on a real loopback call.
type canned struct{}

func (canned) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{},
		Body:       io.NopCloser(strings.NewReader("ok")),
		Request:    req,
	}, nil
}

// BenchmarkTransport is one successful GET through a Transport with an
// in-memory base, against the base alone (impl=base) and the base with a
// 1 s context.WithTimeout per request (impl=base-deadline); impl=callguard
// counts the response when its body is done with (CountBodyErrors, the
// default), impl=callguard-headers-only when its headers arrive. Compare
// with
//
//	benchstat -col /impl out.txt
func BenchmarkTransport(b *testing.B) {
	newChain := func(b *testing.B, withTimeout bool) *chain.Chain {
		r, err := retry.New(retry.MaxAttempts(3), retry.Constant(10*time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		br, err := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
		if err != nil {
			b.Fatal(err)
		}
		ps := []chain.Policy{r, br}
		if withTimeout {
			tp, err := timeout.New(time.Second)
			if err != nil {
				b.Fatal(err)
			}
			ps = append(ps, tp)
		}
		c, err := chain.New(ps...)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	impls := []struct {
		name string
		rt   func(b *testing.B) http.RoundTripper
		dl   bool
	}{
		{"base", func(*testing.B) http.RoundTripper { return canned{} }, false},
		{"base-deadline", func(*testing.B) http.RoundTripper { return canned{} }, true},
		{"callguard-no-timeout", func(b *testing.B) http.RoundTripper { return must(httpmw.New(canned{}, newChain(b, false))) }, false},
		{"callguard", func(b *testing.B) http.RoundTripper { return must(httpmw.New(canned{}, newChain(b, true))) }, false},
		// With metrics on, to an OpenTelemetry SDK meter provider (read by
		// a manual reader: what is measured is the recording).
		{"callguard-metrics", func(b *testing.B) http.RoundTripper {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			return must(httpmw.New(canned{}, newChain(b, true), httpmw.Metrics(mp)))
		}, false},
		// The response counted when its headers arrive, not when its body
		// is done with: what CountBodyErrors (on by default) costs.
		{"callguard-headers-only", func(b *testing.B) http.RoundTripper {
			return must(httpmw.New(canned{}, newChain(b, true), httpmw.CountBodyErrors(false)))
		}, false},
	}
	for _, im := range impls {
		b.Run("impl="+im.name, func(b *testing.B) {
			rt := im.rt(b)
			req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1/x", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				r := req
				var cancel context.CancelFunc = func() {}
				if im.dl {
					var ctx context.Context
					ctx, cancel = context.WithTimeout(context.Background(), time.Second)
					r = req.WithContext(ctx)
				}
				resp, err := rt.RoundTrip(r)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				cancel()
			}
		})
	}
}

// BenchmarkPooledTransport is one successful GET over loopback through a
// Transport whose base is an *http.Transport, with a 1 s attempt timeout:
// impl=unbounded without MaxConnsPerHost, impl=pooled with it, where each
// attempt is traced to judge it on the downstream's own time
// (docs/attempts.md), and impl=pooled-no-timeout with it and no attempt
// timeout (traced too: the others see the connection it holds). Compare
// with
//
//	benchstat -col /impl out.txt
func BenchmarkPooledTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer srv.Close()
	for _, im := range []struct {
		name      string
		maxConns  int
		noTimeout bool
	}{{"unbounded", 0, false}, {"pooled", 4, false}, {"pooled-no-timeout", 4, true}} {
		b.Run("impl="+im.name, func(b *testing.B) {
			base := &http.Transport{MaxConnsPerHost: im.maxConns}
			defer base.CloseIdleConnections()
			ps := []chain.Policy{must(breaker.New(breaker.Settings{ConsecutiveFailures: 5}))}
			if !im.noTimeout {
				ps = append(ps, must(timeout.New(time.Second)))
			}
			c := must(chain.New(ps...))
			rt := must(httpmw.New(base, c))
			req := must(http.NewRequest(http.MethodGet, srv.URL, nil))
			b.ReportAllocs()
			for b.Loop() {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
}
