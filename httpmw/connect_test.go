package httpmw_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/internal/attempt"
	"github.com/callguard/callguard/timeout"
)

// unreachable is what 12 requests, one after another, got from a host that
// cannot be connected to, through a chain of a 3-consecutive breaker and a
// 50 ms attempt timeout.
type unreachable struct {
	failed, fast, queued, other int // cut and counted, refused by the open breaker, cut as the client's wait, else
	state                       breaker.State
}

// twelveToUnreachable sends 12 GETs to url, one after another, through base
// with a 3-consecutive breaker and a 50 ms attempt timeout.
func twelveToUnreachable(t *testing.T, base *http.Transport, url string) unreachable {
	t.Helper()
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: time.Hour}))
	client := &http.Client{Transport: must(httpmw.New(base, must(chain.New(b, must(timeout.New(50*time.Millisecond))))))}
	var got unreachable
	for range 12 {
		_, err := client.Get(url)
		switch {
		case errors.Is(err, breaker.ErrOpen):
			got.fast++
		case errors.As(err, new(*attempt.Queued)):
			got.queued++
		case errors.Is(err, context.DeadlineExceeded):
			got.failed++
		default:
			got.other++
			t.Logf("unexpected: %v", err)
		}
	}
	got.state = b.State()
	return got
}

// TestUnreachableHostOpensBreaker: a host whose dial hangs (a dialer that
// blocks until its context ends: what a dropped SYN looks like to
// net/http), 12 requests, a 3-consecutive breaker, a 50 ms attempt
// timeout, in virtual time. Making a connection is the downstream's time:
// the first 3 attempts are failures and the 9 after them fail fast,
// whether or not the base bounds its connections per host. Before, with
// MaxConnsPerHost, every attempt was cut before GotConn and judged the
// client's wait: 0 fail fast, 12 neutral, the breaker closed.
func TestUnreachableHostOpensBreaker(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxConns int
	}{
		{"unbounded", 0},
		{"MaxConnsPerHost=1", 1},
		{"MaxConnsPerHost=2", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &http.Transport{MaxConnsPerHost: tc.maxConns, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					<-ctx.Done() // net/http goes on dialing after the request gives up
					return nil, ctx.Err()
				}}
				defer base.CloseIdleConnections() // ends the dials no request waits for
				got := twelveToUnreachable(t, base, "http://callguard.test/")
				if want := (unreachable{failed: 3, fast: 9, state: breaker.StateOpen}); got != want {
					t.Errorf("got %+v; want %+v", got, want)
				}
			})
		})
	}
}

// TestExistingConnectionWaitIsNotAFailure: the pool's one connection to a
// healthy host exists and is held, for longer than the attempt timeout, by
// a response whose body its caller has not read yet (through another
// transport over the same base, with no attempt timeout): 6 requests cut
// while they wait for it are the client's waits (attempt.Queued), neutral,
// and the breaker stays closed; once the body is closed, a request gets
// the connection and its answer.
func TestExistingConnectionWaitIsNotAFailure(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	base := &http.Transport{MaxConnsPerHost: 1}
	defer base.CloseIdleConnections()
	holder := &http.Client{Transport: must(httpmw.New(base, must(chain.New(must(breaker.New(breaker.Settings{ConsecutiveFailures: 3}))))))}
	held, err := holder.Get(srv.URL + "/held")
	if err != nil {
		t.Fatal(err)
	}
	b := must(breaker.New(breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: time.Hour}))
	client := &http.Client{Transport: must(httpmw.New(base, must(chain.New(b, must(timeout.New(50*time.Millisecond))))))}
	var queued, other int
	for range 6 {
		_, err := client.Get(srv.URL)
		if errors.As(err, new(*attempt.Queued)) {
			queued++
		} else {
			other++
			t.Logf("not the client's wait: %v", err)
		}
	}
	close(release)
	_, _ = io.Copy(io.Discard, held.Body)
	held.Body.Close()
	resp, err := get(t, client, srv.URL)
	if queued != 6 || b.State() != breaker.StateClosed || err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("%d cut waiting for the held connection, %d other, breaker %v, then %v; want 6, 0, closed, then an answer", queued, other, b.State(), err)
	}
}
