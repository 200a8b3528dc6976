package httpmw_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/internal/testserver"
)

// The tests that assert on time run inside a testing/synctest bubble, in
// virtual time, against memServer: an in-memory base RoundTripper that
// answers as a testserver.HTTP does. Its waits are timers, so every
// duration such a test sees is exact; the tests that need real sockets
// (connection reuse, the wire, protocol upgrades) keep the real servers of
// internal/testserver and assert no time.

// memServer is an in-memory base RoundTripper that answers the n-th request
// (from 1) as answer says, the way testserver.HTTP does on a real socket:
// it reads the request body in full and closes it, waits Delay, or hangs
// (Hang) until the request's context ends, sets Retry-After and
// Content-Length, and sends the body BodyDelay after the headers, its read
// failing with the request context's error if that ends first (as a body
// read from a real connection does). Deaf is not supported. Its URL has no
// path: a request's URL.String() is URL. Make it with newMemServer or newVirtual, inside a
// bubble: the arrival times it records are then exact.
type memServer struct {
	URL      string
	Received atomic.Int64 // requests received
	answer   func(n int64, r *http.Request, body []byte) testserver.HTTPAnswer
	start    time.Time

	mu       sync.Mutex
	arrivals []time.Duration // when each request arrived, since start

	opened, closed atomic.Int64 // response bodies handed out, and closed
}

// newMemServer returns a memServer; at the end of the test, every response
// body it handed out must have been closed. Call it inside a synctest
// bubble.
func newMemServer(t *testing.T, answer func(int64, *http.Request, []byte) testserver.HTTPAnswer) *memServer {
	t.Helper()
	srv := &memServer{URL: "http://callguard.test", answer: answer, start: time.Now()}
	t.Cleanup(func() {
		if o, c := srv.opened.Load(), srv.closed.Load(); o != c {
			t.Errorf("%d response bodies handed out, %d closed; want all closed", o, c)
		}
	})
	return srv
}

// newVirtual returns a memServer, and a client through c with it as the
// base transport: newServer's counterpart in virtual time. Call it inside a
// synctest bubble.
func newVirtual(t *testing.T, answer func(int64, *http.Request, []byte) testserver.HTTPAnswer, c *chain.Chain, opts ...httpmw.Option) (*memServer, *http.Client) {
	t.Helper()
	srv := newMemServer(t, answer)
	return srv, &http.Client{Transport: must(httpmw.New(srv, c, opts...))}
}

// Arrivals returns when each request arrived, since the server was made.
func (s *memServer) Arrivals() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.arrivals...)
}

func (s *memServer) RoundTrip(r *http.Request) (*http.Response, error) {
	n := s.Received.Add(1)
	s.mu.Lock()
	s.arrivals = append(s.arrivals, time.Since(s.start))
	s.mu.Unlock()
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		_ = r.Body.Close() // as a RoundTripper must, even on an error
	}
	a := s.answer(n, r, body)
	ctx := r.Context()
	if a.Hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if a.Delay > 0 {
		t := time.NewTimer(a.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	if a.Status == 0 {
		a.Status = http.StatusOK
	}
	h := http.Header{"Content-Length": {strconv.Itoa(len(a.Body))}}
	if a.RetryAfter != "" {
		h.Set("Retry-After", a.RetryAfter)
	}
	b := &memBody{ctx: ctx, data: strings.NewReader(a.Body), closedCh: make(chan struct{}), closed: &s.closed}
	if a.BodyDelay > 0 {
		b.ready = time.After(a.BodyDelay)
	}
	s.opened.Add(1)
	return &http.Response{
		Status:        strconv.Itoa(a.Status) + " " + http.StatusText(a.Status),
		StatusCode:    a.Status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		ContentLength: int64(len(a.Body)),
		Body:          b,
		Request:       r,
	}, nil
}

var errReadOnClosedBody = errors.New("memServer: read on closed response body")

// memBody is a memServer response's body: it arrives when ready fires (nil:
// with the headers), unless the request's context ends first.
type memBody struct {
	ctx      context.Context
	ready    <-chan time.Time // read by Read only
	data     *strings.Reader
	closedCh chan struct{}
	once     sync.Once
	closed   *atomic.Int64
}

func (b *memBody) Read(p []byte) (int, error) {
	select {
	case <-b.closedCh:
		return 0, errReadOnClosedBody
	default:
	}
	if b.ready != nil {
		select {
		case <-b.ready:
			b.ready = nil
		case <-b.ctx.Done():
			return 0, b.ctx.Err()
		case <-b.closedCh:
			return 0, errReadOnClosedBody
		}
	}
	return b.data.Read(p)
}

// Close unblocks a Read waiting for the body, as closing a real body does.
func (b *memBody) Close() error {
	b.once.Do(func() {
		close(b.closedCh)
		b.closed.Add(1)
	})
	return nil
}

// inBubble runs f as the subtest name, in a synctest bubble of its own: a
// case that fails does not keep the next ones from running (synctest.Test
// ends the test it is given when its bubble fails).
func inBubble(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) { synctest.Test(t, f) })
}

// ms is n milliseconds, to write the exact virtual times tests expect.
func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }
