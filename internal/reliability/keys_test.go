package reliability

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
)

// okTransport answers every request 200 at once: the keyed set's memory,
// not a connection's, is what is measured.
type okTransport struct{}

func (okTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Request: r, Header: http.Header{}}, nil
}

// TestMemoryPerKey: a key of a keyed set (grpcmw.PerMethod, httpmw.PerHost)
// costs at most 1 KiB, with the breaker alone as its chain (whose lint
// finding, CG009, every key's chain has: kept once for all of them) and
// with the recipe of docs/reliability.md (the breaker per key, the retry
// and the attempt timeout shared). The heap is read after a collection
// before the keys are made and after, with every key kept; allocation
// sizes are fixed by the code, so the figure varies by a few bytes only.
//
//	go test ./internal/reliability -run TestMemoryPerKey -v
func TestMemoryPerKey(t *testing.T) {
	const n = 20_000
	r := must(retry.New(retry.MaxAttempts(3)))
	attempt := must(timeout.New(time.Second, timeout.Latency(0.99, 200*time.Millisecond)))
	chains := []struct {
		name  string
		build func(string) (*chain.Chain, error)
	}{
		{"breaker-alone", func(string) (*chain.Chain, error) {
			return chain.New(must(breaker.New(breaker.Settings{})))
		}},
		{"recipe", func(string) (*chain.Chain, error) {
			return chain.New(r, must(breaker.New(breaker.Settings{})), attempt)
		}},
	}
	for _, ch := range chains {
		t.Run("grpc/"+ch.name, func(t *testing.T) {
			ic := must(grpcmw.NewInterceptors(nil, grpcmw.PerMethod(ch.build, n), grpcmw.AllIdempotent()))
			unary := ic.Unary()
			invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
			methods := make([]string, n)
			for i := range methods {
				methods[i] = fmt.Sprintf("/callguard.test.Service/M%d", i)
			}
			per := perKey(n, func(i int) {
				if err := unary(context.Background(), methods[i], nil, nil, nil, invoke); err != nil {
					t.Fatal(err)
				}
			})
			if k := ic.Keys(); k.Kept != n {
				t.Fatalf("%d keys kept, want %d", k.Kept, n)
			}
			report(t, per)
			runtime.KeepAlive(ic)
			runtime.KeepAlive(methods)
		})
		t.Run("http/"+ch.name, func(t *testing.T) {
			tr := must(httpmw.New(okTransport{}, nil, httpmw.PerHost(ch.build, n)))
			reqs := make([]*http.Request, n)
			for i := range reqs {
				reqs[i] = must(http.NewRequest(http.MethodGet, fmt.Sprintf("http://h%d.test/", i), nil))
			}
			per := perKey(n, func(i int) {
				resp, err := tr.RoundTrip(reqs[i])
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
			})
			if k := tr.Keys(); k.Kept != n {
				t.Fatalf("%d keys kept, want %d", k.Kept, n)
			}
			report(t, per)
			runtime.KeepAlive(tr)
			runtime.KeepAlive(reqs)
		})
	}
}

// perKey returns the heap that n calls of makeKey(i) leave live, per call.
func perKey(n int, makeKey func(i int)) float64 {
	// Two collections: what sync.Pool caches of earlier work survive the
	// first.
	runtime.GC()
	runtime.GC()
	h0, _ := memory()
	for i := range n {
		makeKey(i)
	}
	runtime.GC()
	runtime.GC()
	h1, _ := memory()
	return float64(int64(h1)-int64(h0)) / float64(n)
}

func report(t *testing.T, per float64) {
	t.Helper()
	t.Logf("%.0f B per key", per)
	if per > 1024 {
		t.Errorf("%.0f B per key, want at most 1024", per)
	}
}
