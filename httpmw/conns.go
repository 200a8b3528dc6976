package httpmw

import (
	"io"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/callguard/callguard/internal/attempt"
)

// An attempt through an *http.Transport with MaxConnsPerHost may wait for
// a connection. The wait for one that exists (every slot of the pool held
// by a connection in use) is the client's: it says nothing of the host's
// health. The wait for one being made (a dial, a TLS handshake, a dial
// that hangs because the host drops SYNs) is the host's. net/http tells a
// request neither which one it waits for nor whether a dial it started is
// still going on (it goes on after the request gives up, and holds its
// slot of the pool), so the transport keeps the line itself, per host:
// the time during which none of the attempts to the host through the base
// held a connection. While one holds a connection (from httptrace's
// GotConn until its response's body is done with), the pool's slots are
// not all dials, and the wait is the client's; while none does, a waiter
// waits for a connection being made, and that time is the host's.
//
// Attempts are seen by every Transport over the same base (the base is
// the pool), never the requests that reach the base without a Transport
// of this package: connections those hold look like no connection in use.
// A response body its caller never closes holds its connection in
// net/http's pool, and here, for good (the waits for it stay the
// client's). Hosts are named as requests name them (URL.Scheme and
// URL.Host).

// conns is what the Transports over one base see of its connections to
// each host. It is safe for concurrent use.
type conns struct {
	mu    sync.Mutex
	hosts map[hostKey]*hostConns // guarded by mu; a host while attempts to it are in flight
}

type hostKey struct{ scheme, host string }

// hostConns is one host's attempts in flight, those that hold a connection,
// and the time none did. Guarded by conns.mu.
type hostConns struct {
	key      hostKey
	attempts int           // waiting for a connection, or holding one
	inUse    int           // of attempts, those holding a connection
	since    time.Time     // when inUse last became, or stopped being, 0
	idle     time.Duration // time with no connection in use, before since
}

// idleAt is the time until now that no attempt to the host held a
// connection, since the host was first seen with attempts in flight.
func (h *hostConns) idleAt(now time.Time) time.Duration {
	if h.inUse == 0 {
		return h.idle + now.Sub(h.since)
	}
	return h.idle
}

// bases maps each base *http.Transport with MaxConnsPerHost that a
// Transport was made over to its conns: the Transports over one base share
// its pool. An entry goes when its base is garbage.
var bases sync.Map // weak.Pointer[http.Transport] → *conns

// connsOf returns the conns of base, made on first use.
func connsOf(base *http.Transport) *conns {
	k := weak.Make(base)
	if c, ok := bases.Load(k); ok {
		return c.(*conns)
	}
	c, loaded := bases.LoadOrStore(k, &conns{hosts: make(map[hostKey]*hostConns)})
	if !loaded {
		runtime.AddCleanup(base, func(k weak.Pointer[http.Transport]) { bases.Delete(k) }, k)
	}
	return c.(*conns)
}

// wire is an attempt through a base with a bounded connection pool: when it
// got its connection, and, until its response's body is done with, its
// place among the attempts to its host. When it has a response, it is that
// response's body.
type wire struct {
	trace httptrace.ClientTrace
	attempt.Wire
	conns *conns
	host  *hostConns
	idle0 time.Duration // the host's idle time when the attempt began
	// Guarded by conns.mu.
	holding bool // between GotConn and done
	done    bool // the attempt's connection (if any) is given back
	body    io.ReadCloser
}

// start starts w for an attempt to req's host whose deadline is dl.
func (w *wire) start(c *conns, req *http.Request, dl time.Time) {
	w.Start(dl)
	w.conns = c
	w.trace.GotConn = func(httptrace.GotConnInfo) { w.gotConn() }
	key := hostKey{req.URL.Scheme, req.URL.Host}
	now := time.Now()
	c.mu.Lock()
	h := c.hosts[key]
	if h == nil {
		h = &hostConns{key: key, since: now}
		c.hosts[key] = h
	}
	h.attempts++
	w.host, w.idle0 = h, h.idleAt(now)
	c.mu.Unlock()
}

// gotConn is httptrace's GotConn: the attempt holds a connection, and is
// with the host from now.
func (w *wire) gotConn() {
	now := time.Now()
	c, h := w.conns, w.host
	c.mu.Lock()
	if !w.holding && !w.done {
		w.holding = true
		if h.inUse == 0 {
			h.idle += now.Sub(h.since)
			h.since = now
		}
		h.inUse++
	}
	c.mu.Unlock()
	w.Reached()
}

// judge returns err, the attempt's error, as the attempt's: neutral if its
// deadline cut it before it had half its time on the host's (see
// attempt.Pooled). An attempt cut before it had a connection spent on the
// host's time what of its wait passed with no connection to the host in
// use: it waited for one being made.
func (w *wire) judge(err error) error {
	if err == nil {
		return nil
	}
	var making time.Duration
	c := w.conns
	c.mu.Lock()
	if !w.holding && !w.done {
		making = w.host.idleAt(time.Now()) - w.idle0
	}
	c.mu.Unlock()
	return w.Judge(err, making)
}

// end gives back the attempt's place among its host's: its connection, if
// it had one, is no longer in use. It is idempotent.
func (w *wire) end() {
	now := time.Now()
	c, h := w.conns, w.host
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.done {
		return
	}
	w.done = true
	if w.holding {
		h.inUse--
		if h.inUse == 0 {
			h.since = now
		}
	}
	if h.attempts--; h.attempts == 0 {
		delete(c.hosts, h.key)
	}
}

// keepUntilRead makes w the body of resp, which holds the attempt's
// connection until it is read to its end or closed; a response with no
// body to read (or a protocol upgrade, whose body is the connection, no
// longer the pool's) gives it back now.
func (w *wire) keepUntilRead(resp *http.Response) {
	if resp.Body == nil || resp.Body == http.NoBody || resp.StatusCode == http.StatusSwitchingProtocols {
		w.end()
		return
	}
	w.body = resp.Body
	resp.Body = w
}

// Read reads the response's body; its end, or an error, gives the
// connection back.
func (w *wire) Read(p []byte) (int, error) {
	n, err := w.body.Read(p)
	if err != nil {
		w.end()
	}
	return n, err
}

// Close closes the response's body and gives the connection back.
func (w *wire) Close() error {
	err := w.body.Close()
	w.end()
	return err
}
