package testserver

import (
	"net/http"
	"testing"
	"time"
)

// TestHTTPCloseEndsHangingHandlers: Close returns although a client is
// still waiting on a Hang answer (it closes the client connections first).
func TestHTTPCloseEndsHangingHandlers(t *testing.T) {
	srv := NewHTTP(func(int64, *http.Request, []byte) HTTPAnswer { return HTTPAnswer{Hang: true} })
	client := &http.Client{Transport: &http.Transport{}} // no timeout: it would wait forever
	errc := make(chan error, 1)
	go func() {
		resp, err := client.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	for srv.Received.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // a bound on a hang, not a speed goal
		t.Fatal("Close still waits for a hanging handler after 10 s")
	}
	if err := <-errc; err == nil {
		t.Error("the hanging request succeeded")
	}
	client.CloseIdleConnections()
}
