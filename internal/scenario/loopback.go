package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
)

// Loopback is a Cell.Network: a real HTTP server on 127.0.0.1 in front of
// the simulated downstream, in this process, each call a GET to it over a
// real socket (Process puts the downstream in another process). The
// server's answers cross the wire as statuses and come back as the errors
// a stack judges: a success is 200; the downstream's queue full
// (ErrOverloaded) is a 429, returned as an error matching ErrOverloaded;
// any other failure is a 503. A caller that gives up closes its request,
// which ends the server's call with it.
func Loopback(server func(context.Context) error) (call func(context.Context) error, stop func(), err error) {
	srv := httptest.NewServer(handler(server))
	call, closeIdle := httpCall(srv.URL)
	return call, func() {
		closeIdle()
		srv.CloseClientConnections()
		srv.Close()
	}, nil
}

// handler is the HTTP face of a simulated downstream: 200, 429 for its
// queue full, 503 for any other failure.
func handler(server func(context.Context) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch err := server(r.Context()); {
		case err == nil:
			_, _ = io.WriteString(w, "ok")
		case errors.Is(err, ErrOverloaded):
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
}

// httpCall is a call to the handler at url, its statuses read back as
// errors, and what closes its idle connections.
func httpCall(url string) (call func(context.Context) error, closeIdle func()) {
	tr := &http.Transport{MaxIdleConnsPerHost: 512}
	client := &http.Client{Transport: tr}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			return fmt.Errorf("%w (%s)", ErrOverloaded, resp.Status)
		case resp.StatusCode >= 500:
			return errors.New(resp.Status)
		}
		return nil
	}, tr.CloseIdleConnections
}
