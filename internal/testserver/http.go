package testserver

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"time"
)

// HTTPAnswer says how the HTTP server answers one request.
type HTTPAnswer struct {
	Status     int           // 0: 200
	Delay      time.Duration // before answering
	Hang       bool          // until the client gives up
	RetryAfter string        // a Retry-After header
	Body       string
	BodyDelay  time.Duration // between the headers and the body
	// Deaf: the Delay runs to its end even if the client has gone; a
	// request whose client had gone by then counts in Wasted.
	Deaf bool
}

// HTTP is a loopback HTTP server.
type HTTP struct {
	*httptest.Server
	Received    atomic.Int64 // requests received
	Finished    atomic.Int64 // requests answered in full
	Connections atomic.Int64 // connections opened by clients
	Wasted      atomic.Int64 // deaf answers finished after their client had gone
	answer      func(n int64, r *http.Request, body []byte) HTTPAnswer
}

// NewHTTP starts a server that answers the n-th request (from 1) as answer
// says; answer gets the request and its body, read in full.
func NewHTTP(answer func(n int64, r *http.Request, body []byte) HTTPAnswer) *HTTP {
	s := &HTTP{answer: answer}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Server.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.Connections.Add(1)
		}
	}
	s.Start()
	return s
}

// Close closes the client connections first, so that handlers still
// waiting (Hang, Delay) end at once, then shuts the server down.
func (s *HTTP) Close() {
	s.Server.CloseClientConnections()
	s.Server.Close()
}

func (s *HTTP) serve(w http.ResponseWriter, r *http.Request) {
	n := s.Received.Add(1)
	body, _ := io.ReadAll(r.Body)
	a := s.answer(n, r, body)
	if a.Hang {
		<-r.Context().Done()
		return
	}
	if a.Deaf {
		time.Sleep(a.Delay)
		if r.Context().Err() != nil {
			s.Wasted.Add(1)
			return
		}
	} else if !sleep(r.Context(), a.Delay) {
		return
	}
	if a.RetryAfter != "" {
		w.Header().Set("Retry-After", a.RetryAfter)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(a.Body)))
	if a.Status == 0 {
		a.Status = http.StatusOK
	}
	w.WriteHeader(a.Status)
	if a.BodyDelay > 0 {
		w.(http.Flusher).Flush()
		if !sleep(r.Context(), a.BodyDelay) {
			return
		}
	}
	_, _ = io.WriteString(w, a.Body)
	s.Finished.Add(1)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
