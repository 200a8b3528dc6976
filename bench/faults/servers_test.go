package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// The phases of a cell. Every call carries the phase it started in
// (phaseHeader), and every server counts the attempts it received by it:
// "calls received" are the attempts of the calls started during the
// fault, whenever the server reads them (a paused server reads them when
// it resumes).
const (
	phaseWarm = iota
	phaseFault
	phaseRecovery
	phases
)

// phaseHeader is the request header (HTTP) and metadata key (gRPC) that
// carries a call's phase.
const phaseHeader = "x-fault-phase"

// counts are the attempts a server received, by phase.
type counts [phases]atomic.Int64

func (c *counts) add(phase string) {
	if p, err := strconv.Atoi(phase); err == nil && p >= 0 && p < phases {
		c[p].Add(1)
	}
}

func (c *counts) snapshot() [phases]int64 {
	var s [phases]int64
	for i := range c {
		s[i] = c[i].Load()
	}
	return s
}

// The bodies: small for every call, large where the fault needs it
// (bandwidth).
const (
	smallBody = 1 << 10
	largeBody = 8 << 10
)

var bodies = map[string][]byte{"/small": make([]byte, smallBody), "/large": make([]byte, largeBody)}

// grpcServer is grpc-go's interop TestService on 127.0.0.1:0, counting
// the attempts it receives.
type grpcServer struct {
	addr   string
	counts counts
	srv    *grpc.Server
	done   chan struct{}
}

func startGRPC() (*grpcServer, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &grpcServer{addr: lis.Addr().String(), done: make(chan struct{})}
	s.srv = grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get(phaseHeader); len(v) > 0 {
				s.counts.add(v[0])
			}
		}
		return h(ctx, req)
	}))
	testgrpc.RegisterTestServiceServer(s.srv, interop.NewTestServer())
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(lis)
	}()
	return s, nil
}

func (s *grpcServer) stop() {
	s.srv.Stop()
	<-s.done
}

// httpServer is a net/http server on 127.0.0.1:0 answering GET /small
// and /large with a body of that size, counting the requests it
// receives. While bad is set it answers 503 at once: one bad backend.
type httpServer struct {
	addr   string
	counts counts
	bad    atomic.Bool
	srv    *http.Server
	done   chan struct{}
}

func startHTTP() (*httpServer, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &httpServer{addr: lis.Addr().String(), done: make(chan struct{})}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.counts.add(r.Header.Get(phaseHeader))
		body, ok := bodies[r.URL.Path]
		switch {
		case !ok:
			http.NotFound(w, r)
			return
		case s.bad.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(lis)
	}()
	return s, nil
}

func (s *httpServer) stop() {
	_ = s.srv.Close()
	<-s.done
}

// The server process: the servers of a cell whose server is paused with
// SIGSTOP, so that they run in a process of their own. serveEnvProto
// (grpc or http) and serveEnvN (how many) say which; the process answers
// with the servers' addresses (served), then, for every line it reads,
// the attempts each received by phase; it ends when its standard input
// closes.
const (
	serveEnvProto = "CALLGUARD_FAULTS_SERVE_PROTO"
	serveEnvN     = "CALLGUARD_FAULTS_SERVE_N"
)

type served struct {
	Addrs []string
}

func serveProcess() error {
	n, err := strconv.Atoi(os.Getenv(serveEnvN))
	if err != nil || n < 1 || n > 64 {
		return fmt.Errorf("faults: %s=%q: want a count of servers", serveEnvN, os.Getenv(serveEnvN))
	}
	var (
		addrs []string
		cs    []*counts
		stops []func()
	)
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	for range n {
		switch proto := os.Getenv(serveEnvProto); proto {
		case "grpc":
			s, err := startGRPC()
			if err != nil {
				return err
			}
			addrs, cs, stops = append(addrs, s.addr), append(cs, &s.counts), append(stops, s.stop)
		case "http":
			s, err := startHTTP()
			if err != nil {
				return err
			}
			addrs, cs, stops = append(addrs, s.addr), append(cs, &s.counts), append(stops, s.stop)
		default:
			return fmt.Errorf("faults: %s=%q: want grpc or http", serveEnvProto, proto)
		}
	}
	out := bufio.NewWriter(os.Stdout)
	if err := jsonLine(out, served{Addrs: addrs}); err != nil {
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		snap := make([][phases]int64, len(cs))
		for i, c := range cs {
			snap[i] = c.snapshot()
		}
		if err := jsonLine(out, snap); err != nil {
			return err
		}
	}
	return in.Err()
}

// remoteServers are the servers of a serveProcess: pid is the process to
// pause, addrs its servers' addresses, counts asks it for what they
// received.
type remoteServers struct {
	pid    int
	addrs  []string
	counts func() ([][phases]int64, error)
	stop   func() error
}

func startRemote(proto string, n int) (*remoteServers, error) {
	cmd := selfCommand(roleServe, serveEnvProto+"="+proto, serveEnvN+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := bufio.NewScanner(stdout)
	var mu sync.Mutex
	read := func(v any) error {
		if !lines.Scan() {
			return errors.Join(errors.New("faults: the server process ended"), lines.Err())
		}
		return json.Unmarshal(lines.Bytes(), v)
	}
	stop := func() error {
		_ = stdin.Close()
		return cmd.Wait()
	}
	var ready served
	if err := read(&ready); err != nil {
		_ = cmd.Process.Kill()
		return nil, errors.Join(err, stop())
	}
	return &remoteServers{
		pid:   cmd.Process.Pid,
		addrs: ready.Addrs,
		counts: func() ([][phases]int64, error) {
			mu.Lock()
			defer mu.Unlock()
			if _, err := stdin.Write([]byte("counts\n")); err != nil {
				return nil, err
			}
			var snap [][phases]int64
			err := read(&snap)
			return snap, err
		},
		stop: stop,
	}, nil
}
