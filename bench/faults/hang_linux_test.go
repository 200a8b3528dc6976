package faults

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// hangListener listens on addr and never accepts: its accept queue (a
// backlog of 0 holds one connection) is filled at once by a connection of
// its own, so that the kernel drops every further SYN and a real connect
// to addr hangs on loopback, as to a host that drops SYNs, until the
// dialer gives up. close stops it and resets what it held.
func hangListener(addr string) (closeFn func(), err error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (func(), error) {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("faults: a listener that hangs on %s: %w", addr, err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return fail(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}); err != nil {
		return fail(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		return fail(err)
	}
	var held []net.Conn
	closeFn = func() {
		_ = syscall.Close(fd)
		for _, c := range held {
			_ = c.Close()
		}
	}
	// Fill the queue: dial until a dial hangs (bounded: 8 tries).
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 20*time.Millisecond)
		if err != nil {
			return closeFn, nil
		}
		held = append(held, c)
	}
	closeFn()
	return nil, fmt.Errorf("faults: a listener that hangs on %s: 8 connects went through a backlog of 0", addr)
}
