package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/internal/scenario"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// serve is the lab's downstream as a process of its own (callguard-lab
// serve --addr host:port [--proto grpc]): an HTTP server, or a gRPC server
// of the health service, that answers every request after a few
// milliseconds, and says "ready" on its standard output once it listens. It runs until it is killed, or, on SIGINT or SIGTERM, says it
// was interrupted and exits 130 or 143, as the lab does.
func serve(args []string) int {
	fs := flag.NewFlagSet("callguard-lab serve", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "the address to listen on")
	proto := fs.String("proto", "http", "what to serve: http, or grpc (the health service's Check)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *proto != "http" && *proto != "grpc" {
		fmt.Fprintf(os.Stderr, "callguard-lab serve: --proto %q: want http or grpc\n", *proto)
		return 2
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "callguard-lab serve: %v\n", err)
		return 1
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "ok")
	})}
	ctx, status, stop := interruption()
	defer stop()
	serveOn, closeSrv := func(l net.Listener) error { return srv.Serve(l) }, func() { _ = srv.Close() }
	if *proto == "grpc" {
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, slowHealth{})
		serveOn, closeSrv = gs.Serve, gs.Stop
	}
	stopServe := context.AfterFunc(ctx, closeSrv)
	defer stopServe()
	fmt.Println("ready", lis.Addr())
	if err := serveOn(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(os.Stderr, "callguard-lab serve: %v\n", err)
		return 1
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "callguard-lab serve: interrupted")
		return status()
	}
	return 0
}

// slowHealth is the gRPC downstream: Check answers SERVING after a few
// milliseconds, as the HTTP one answers "ok".
type slowHealth struct {
	healthpb.UnimplementedHealthServer
}

func (slowHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	select {
	case <-time.After(5 * time.Millisecond):
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// children are the processes the lab started: every one is killed when it
// exits, also on Ctrl-C. Once closed, a process started is killed at once.
type children struct {
	mu     sync.Mutex
	procs  []*exec.Cmd // guarded by mu
	closed bool        // guarded by mu
}

// start runs callguard-lab serve on addr, serving proto ("http" or
// "grpc"), and waits until it listens.
func (c *children) start(ctx context.Context, addr, proto string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "serve", "--addr", addr, "--proto", proto)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the downstream process: %w", err)
	}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.procs = append(c.procs, cmd)
	}
	c.mu.Unlock()
	if closed {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, context.Canceled
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && len(line) >= 5 && line[:5] == "ready" {
			ready <- nil
		} else {
			ready <- fmt.Errorf("the downstream process did not start: %q %v", line, err)
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case err := <-ready:
		if err != nil {
			c.kill(cmd)
			return nil, err
		}
		return cmd, nil
	case <-time.After(10 * time.Second):
		c.kill(cmd)
		return nil, errors.New("the downstream process did not say ready within 10 s")
	case <-ctx.Done():
		c.kill(cmd)
		return nil, ctx.Err()
	}
}

// kill sends SIGKILL to cmd and waits for it, unless killAll or close has
// taken it already.
func (c *children) kill(cmd *exec.Cmd) {
	c.mu.Lock()
	i := slices.Index(c.procs, cmd)
	if i >= 0 {
		c.procs = slices.Delete(c.procs, i, i+1)
	}
	c.mu.Unlock()
	if i >= 0 {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
}

// killAll sends SIGKILL to every process and waits for them.
func (c *children) killAll() {
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	for _, p := range procs {
		_ = p.Process.Signal(syscall.SIGKILL)
		_ = p.Wait()
	}
}

// close kills every process, as killAll, and every one started after.
func (c *children) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.killAll()
}

// sleep waits for d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// freeAddr finds a free loopback port.
func freeAddr() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}

// kill is K1 over proto: a downstream process killed with SIGKILL mid-run,
// then restarted on the same port, as the reference runs did with kill -9.
func (l *lab) kill(proto string) error {
	const (
		killAt, restartAt, end = time.Second, 2500 * time.Millisecond, 4 * time.Second
		deadline               = 500 * time.Millisecond
		callers                = 5
	)
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	cmd, err := l.children.start(l.ctx, addr, proto)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	start := time.Now()
	var events []string
	var changes []scenario.Event
	var marks []scenario.Mark
	var opened, halfOpened, closedAfter time.Duration = -1, -1, -1
	b, err := breaker.New(breaker.Settings{ConsecutiveFailures: 5, OpenTimeout: 200 * time.Millisecond, HalfOpenSuccesses: 2,
		OnStateChange: func(from, to breaker.State) {
			mu.Lock()
			defer mu.Unlock()
			at := time.Since(start)
			events = append(events, fmt.Sprintf("%v → %v at %.2f s", from, to, at.Seconds()))
			changes = append(changes, scenario.Event{At: at, From: from, To: to})
			switch {
			case to == breaker.StateOpen && opened < 0 && at >= killAt:
				opened = at
			case to == breaker.StateHalfOpen && halfOpened < 0 && opened >= 0:
				halfOpened = at
			case to == breaker.StateClosed && at >= restartAt && closedAfter < 0:
				closedAfter = at
			}
		}})
	if err != nil {
		return err
	}
	r, err := retry.New(retry.MaxAttempts(3), retry.Exponential(20*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		return err
	}
	at, err := timeout.New(200 * time.Millisecond)
	if err != nil {
		return err
	}
	c, err := chain.New(r, b, at)
	if err != nil {
		return err
	}
	call, closeClient, err := killClient(proto, addr, c, callers)
	if err != nil {
		return err
	}
	defer closeClient()
	var ok, failed, rejected, late int
	var worst time.Duration
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for time.Since(start) < end && l.ctx.Err() == nil {
				ctx, cancel := context.WithTimeout(l.ctx, deadline)
				t0 := time.Now()
				err := call(ctx)
				took := time.Since(t0)
				cancel()
				mu.Lock()
				worst = max(worst, took)
				kind := "failure"
				switch {
				case took > deadline+50*time.Millisecond:
					late++
					kind = "timeout"
				case err == nil:
					ok++
					kind = "ok"
				case errors.Is(err, breaker.ErrOpen):
					rejected++
					kind = "rejected"
				default:
					failed++
					if errors.Is(err, context.DeadlineExceeded) || timeout.Expired(err) {
						kind = "timeout"
					}
				}
				marks = append(marks, scenario.Mark{At: time.Since(start), Kind: kind})
				mu.Unlock()
				sleep(l.ctx, 20*time.Millisecond)
			}
		})
	}
	sleep(l.ctx, time.Until(start.Add(killAt)))
	l.children.kill(cmd)
	sleep(l.ctx, time.Until(start.Add(restartAt)))
	var restartErr error
	if l.ctx.Err() == nil {
		if _, restartErr = l.children.start(l.ctx, addr, proto); restartErr != nil {
			restartErr = fmt.Errorf("restarting the downstream process: %w", restartErr)
		}
	}
	wg.Wait()
	l.children.killAll()
	if restartErr != nil {
		return restartErr
	}
	if err := l.ctx.Err(); err != nil {
		return err
	}
	setup := fmt.Sprintf("The downstream runs as a process of its own (callguard-lab serve --proto %s); %d callers, each request with a %v deadline, through %v. SIGKILL at %v, restarted on the same port at %v, until %v.",
		proto, callers, deadline, c, killAt, restartAt, end)
	if proto == "grpc" {
		setup += " One connection; it reconnects with a backoff of 50 ms growing to 200 ms (grpc.WithConnectParams; with grpc-go's default, 1 s growing × 1.6 with 20 % jitter, the first reconnection after the restart can come later than the 0.5 s the table allows to close)."
	}
	t := &Table{ID: "K1", Title: "kill -9: a downstream process killed mid-run and restarted", Proto: proto, Scale: 1,
		Setup:     setup,
		Columns:   []string{"what", "measured", "expected"},
		Tolerance: "the breaker opens within 0.5 s of the kill, probes, and closes within 0.5 s of the restart; no request returns later than its deadline (+ 50 ms)"}
	// An instant in seconds, or "never" with no value.
	instant := func(v time.Duration) Cell {
		if v < 0 {
			return text("never")
		}
		return num(v.Seconds(), "s", none, "%.2f s")
	}
	count := func(v int) Cell { return num(float64(v), "requests", none, "%.0f") }
	const allowed = 500 * time.Millisecond
	span := func(from time.Duration) string {
		return fmt.Sprintf("%.2f–%.2f s", from.Seconds(), (from + allowed).Seconds())
	}
	t.Rows = [][]Cell{
		{text("breaker opened"), instant(opened), text(span(killAt))},
		{text("first half-open (probes)"), instant(halfOpened), text("after it opened")},
		{text("closed again"), instant(closedAfter), text(span(restartAt))},
		{text("requests ok"), count(ok), text("")},
		{text("requests failed"), count(failed), text("")},
		{text("requests rejected by the breaker"), count(rejected), text("more than 0: rejected while down")},
		{text(fmt.Sprintf("requests later than their deadline + 50 ms (%v)", deadline+50*time.Millisecond)), count(late), text("0")},
		{text("the slowest request"), num(ms(worst), "ms", none, "%.0f ms"), text(fmt.Sprintf("at most %v", deadline+50*time.Millisecond))},
	}
	t.Noise = l.measured(1)
	// window checks that at is within allowed after from, and returns a
	// reference tick at the latest instant allowed, marked off if not.
	window := func(what, label string, at, from time.Duration) TimelineRef {
		if at < 0 {
			t.expect(what+": never", false)
		} else {
			t.between(what, at.Seconds(), from.Seconds(), (from + allowed).Seconds(), "s", true)
		}
		return TimelineRef{At: (from + allowed).Seconds(), Label: label, Note: fmt.Sprintf("%s: by %.2f s", what, (from + allowed).Seconds()),
			Off: !t.checks[len(t.checks)-1].pass(t.allowance("s"))}
	}
	openBy := window("the breaker opened within 0.5 s of the kill", "open by", opened, killAt)
	t.expect("it went half-open after opening", halfOpened > opened && opened >= 0)
	closedBy := window("it closed within 0.5 s of the restart", "closed by", closedAfter, restartAt)
	t.between("the slowest request, against its deadline + 50 ms", ms(worst), math.Inf(-1), ms(deadline+50*time.Millisecond), "ms", true)
	t.between("rejections while the downstream was down", float64(rejected), 1, math.Inf(1), "requests", false)
	if len(events) == 0 {
		events = []string{"none"}
	}
	t.Notes = append(t.Notes, "transitions: "+strings.Join(events, "; "))
	tl := timeline("K1-"+proto, fmt.Sprintf("K1 over %s: the downstream process killed at %v and restarted at %v", protoName(proto), killAt, restartAt), end, changes, marks, [][2]time.Duration{{killAt, restartAt}})
	tl.Refs = []TimelineRef{openBy, closedBy}
	l.report.Timelines = append(l.report.Timelines, tl)
	l.add(t)
	return nil
}

// killClient is K1's client over proto, through c: one request to the
// downstream at addr, and what closes the client.
func killClient(proto, addr string, c *chain.Chain, callers int) (func(context.Context) error, func(), error) {
	if proto == "grpc" {
		ic, err := grpcmw.NewInterceptors(c, grpcmw.AllIdempotent(), grpcmw.UnaryOnly())
		if err != nil {
			return nil, nil, err
		}
		opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
				MinConnectTimeout: time.Second})}, ic.DialOptions()...)
		conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
		if err != nil {
			return nil, nil, err
		}
		client := healthpb.NewHealthClient(conn)
		return func(ctx context.Context) error {
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		}, func() { _ = conn.Close() }, nil
	}
	base := &http.Transport{MaxIdleConnsPerHost: callers}
	tr, err := httpmw.New(base, c)
	if err != nil {
		return nil, nil, err
	}
	client := &http.Client{Transport: tr}
	return func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode >= 500 {
			return errors.New(resp.Status)
		}
		return nil
	}, base.CloseIdleConnections, nil
}
