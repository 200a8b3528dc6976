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
// the simulated downstream, each call a GET to it over a real socket. The
// server's answers cross the wire as statuses and come back as the errors
// a stack judges: a success is 200; the downstream's queue full
// (ErrOverloaded) is a 429, returned as an error matching ErrOverloaded;
// any other failure is a 503. A caller that gives up closes its request,
// which ends the server's call with it.
func Loopback(server func(context.Context) error) (call func(context.Context) error, stop func(), err error) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch err := server(r.Context()); {
		case err == nil:
			_, _ = io.WriteString(w, "ok")
		case errors.Is(err, ErrOverloaded):
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	tr := &http.Transport{MaxIdleConnsPerHost: 512}
	client := &http.Client{Transport: tr}
	call = func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
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
	}
	return call, func() {
		tr.CloseIdleConnections()
		srv.CloseClientConnections()
		srv.Close()
	}, nil
}
