package etcd_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcd is a real etcd server, Debian's etcd-server package, run as a
// process of its own on free loopback ports, with its data in a test
// directory: kill and start again, stop (SIGSTOP) and resume.
type etcd struct {
	t          testing.TB
	bin, dir   string
	client     string // host:port
	peer       string
	mu         sync.Mutex
	cmd        *exec.Cmd
	out        bytes.Buffer // the server's own log, shown when a test fails
	exited     chan struct{}
	stopped    bool
	startCount int
}

// etcdBinary is the etcd binary's path, or "" when there is none: the
// test then skips, or fails under CI (CI=1), which installs it.
func etcdBinary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no etcd binary (CI installs Debian's etcd-server): %v", err)
		}
		t.Skipf("no etcd binary (apt-get install etcd-server): %v", err)
	}
	return bin
}

// startEtcd starts a server on two free loopback ports; t's cleanup kills
// it.
func startEtcd(t testing.TB) *etcd {
	t.Helper()
	e := &etcd{t: t, bin: etcdBinary(t), dir: t.TempDir()}
	var err error
	for range 5 { // a free port taken by someone else before etcd binds it
		e.client, e.peer = freeAddr(t), freeAddr(t)
		if err = e.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.kill)
	t.Cleanup(func() {
		if t.Failed() {
			e.mu.Lock()
			t.Logf("etcd's log:\n%s", e.out.String())
			e.mu.Unlock()
		}
	})
	return e
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs the server on e's ports and data directory and waits until
// it answers a Get, for at most 20 s.
func (e *etcd) start() error {
	e.mu.Lock()
	e.startCount++
	cmd := exec.Command(e.bin,
		"--name", "default",
		"--data-dir", filepath.Join(e.dir, "data"),
		"--listen-client-urls", "http://"+e.client,
		"--advertise-client-urls", "http://"+e.client,
		"--listen-peer-urls", "http://"+e.peer,
		"--initial-advertise-peer-urls", "http://"+e.peer,
		"--initial-cluster", "default=http://"+e.peer,
		"--logger", "zap", "--log-level", "warn",
	)
	cmd.Stdout, cmd.Stderr = &lockedWriter{&e.mu, &e.out}, &lockedWriter{&e.mu, &e.out}
	if err := cmd.Start(); err != nil {
		e.mu.Unlock()
		return fmt.Errorf("starting etcd: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	e.cmd, e.exited, e.stopped = cmd, exited, false
	e.mu.Unlock()

	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.client}, Logger: zap.NewNop(), DialTimeout: time.Second})
	if err != nil {
		e.kill()
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := c.Get(ctx, "ready")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			e.mu.Lock()
			defer e.mu.Unlock()
			return fmt.Errorf("etcd on %s exited at its start %d: %s", e.client, e.startCount, e.out.String())
		default:
		}
		if time.Now().After(deadline) {
			e.kill()
			return fmt.Errorf("etcd on %s did not answer within 20 s: %v", e.client, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill ends the server with SIGKILL, as a crash does, and waits for it.
func (e *etcd) kill() {
	e.mu.Lock()
	cmd, exited := e.cmd, e.exited
	e.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies of SIGKILL too, but let it go
	_ = cmd.Process.Kill()
	<-exited
}

// restart starts the server again on the same ports and data.
func (e *etcd) restart() {
	e.t.Helper()
	if err := e.start(); err != nil {
		e.t.Fatal(err)
	}
}

// stop freezes the server (SIGSTOP): its connections stay open and
// nothing answers, as a hung host; resume undoes it.
func (e *etcd) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.cmd.Process.Signal(syscall.SIGSTOP)
	e.stopped = true
	// The signal is delivered as each thread is scheduled: on a loaded
	// machine, a thread can still answer a call sent right after Signal
	// returns. Wait until every thread says it is stopped (T in
	// /proc/PID/task/*/stat), for at most 5 s.
	pid := e.cmd.Process.Pid
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if allStopped(pid) {
			return
		}
	}
	e.t.Fatalf("etcd (pid %d) not stopped 5 s after SIGSTOP", pid)
}

// allStopped reports whether every thread of pid is stopped.
func allStopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			return false
		}
		// pid (comm) state …: comm may hold spaces, the state follows the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}

func (e *etcd) resume() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		_ = e.cmd.Process.Signal(syscall.SIGCONT)
		e.stopped = false
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
