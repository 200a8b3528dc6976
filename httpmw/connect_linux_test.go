//go:build linux

package httpmw_test

import (
	"net"
	"net/http"
	"syscall"
	"testing"

	"github.com/callguard/callguard/breaker"
)

// hangingListener returns a loopback listener whose dials hang, as a host
// that drops SYNs: its accept queue (backlog 0, set with a second listen,
// which Linux allows on a listening socket) is filled by one connection
// and nothing is ever accepted, so that Linux drops every further SYN. It
// is closed at the end of the test.
func hangingListener(t *testing.T) net.Listener {
	t.Helper()
	l := must(net.Listen("tcp", "127.0.0.1:0"))
	t.Cleanup(func() { l.Close() })
	rc := must(l.(*net.TCPListener).SyscallConn())
	var lerr error
	if err := rc.Control(func(fd uintptr) { lerr = syscall.Listen(int(fd), 0) }); err != nil || lerr != nil {
		t.Fatalf("listen with backlog 0: %v %v", err, lerr)
	}
	filler := must(net.Dial("tcp", l.Addr().String()))
	t.Cleanup(func() { filler.Close() })
	return l
}

// TestDroppedSYNsOpenBreaker is TestUnreachableHostOpensBreaker on a real
// socket: a loopback host that drops SYNs (the dial of net/http's own
// dialer hangs), 12 requests, a 3-consecutive breaker, a 50 ms attempt
// timeout: 3 failures, then 9 fail fast, with or without MaxConnsPerHost.
// Before, with MaxConnsPerHost=1: 0 fail fast, 12 neutral.
func TestDroppedSYNsOpenBreaker(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxConns int
	}{
		{"unbounded", 0},
		{"MaxConnsPerHost=1", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := hangingListener(t)
			base := &http.Transport{MaxConnsPerHost: tc.maxConns}
			defer base.CloseIdleConnections() // ends the dials no request waits for
			got := twelveToUnreachable(t, base, "http://"+l.Addr().String()+"/")
			if want := (unreachable{failed: 3, fast: 9, state: breaker.StateOpen}); got != want {
				t.Errorf("got %+v; want %+v", got, want)
			}
		})
	}
}
