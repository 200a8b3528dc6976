//go:build unix

package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestInterrupt builds the lab and, for each of its modes, starts it, sends
// it one signal once it has begun (its first line of output; for K1, once
// its downstream process runs), and checks that it ends within 2 s, says it
// was interrupted, exits 130 for SIGINT and 143 for SIGTERM, and leaves no
// process of its own behind.
func TestInterrupt(t *testing.T) {
	built := filepath.Join(t.TempDir(), "callguard-lab")
	build := exec.Command("go", "build", "-o", built, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const within = 2 * time.Second
	for _, tc := range []struct {
		name   string
		args   []string
		sig    syscall.Signal
		status int
		child  bool   // wait for the downstream process before the signal
		say    string // what its standard error says
	}{
		{name: "quick", args: nil, sig: syscall.SIGINT, status: 130, say: "callguard-lab: interrupted"},
		{name: "full", args: []string{"--full"}, sig: syscall.SIGINT, status: 130, say: "callguard-lab: interrupted"},
		{name: "only-grpc", args: []string{"--only", "C4", "--proto", "grpc"}, sig: syscall.SIGINT, status: 130, say: "callguard-lab: interrupted"},
		{name: "virtual", args: []string{"--only", "A3", "--full"}, sig: syscall.SIGINT, status: 130, say: "callguard-lab: interrupted"},
		{name: "kill", args: []string{"--only", "K1"}, sig: syscall.SIGINT, status: 130, child: true, say: "callguard-lab: interrupted"},
		{name: "chain", args: []string{"--chain", "../../spec/testdata/example.yaml"}, sig: syscall.SIGINT, status: 130, say: "callguard-lab: interrupted"},
		{name: "chain-live", args: []string{"--chain", "../../spec/testdata/example.yaml", "--live"}, sig: syscall.SIGINT, status: 130, say: "callguard-lab: interrupted"},
		{name: "chain-live-sigterm", args: []string{"--chain", "../../spec/testdata/overload.yaml", "--live", "--callers", "20"}, sig: syscall.SIGTERM, status: 143, say: "callguard-lab: interrupted"},
		{name: "serve", args: []string{"serve"}, sig: syscall.SIGINT, status: 130, say: "callguard-lab serve: interrupted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A name of its own (a hard link), for the processes left
			// behind to be this run's.
			bin := filepath.Join(t.TempDir(), "callguard-lab")
			if err := os.Link(built, bin); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, tc.args...)
			var stderr syncBuffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill() }()
			lines := make(chan string, 1)
			go func() {
				r := bufio.NewReader(out)
				line, _ := r.ReadString('\n')
				lines <- line
				_, _ = r.WriteTo(&bytes.Buffer{}) // the rest, so that it never blocks on a full pipe
			}()
			select {
			case line := <-lines:
				if line == "" {
					t.Fatalf("it printed nothing: %s", stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no output within 30 s")
			}
			var kids []int
			if tc.child {
				kids = waitChildren(t, cmd.Process.Pid, bin)
			}
			ended := make(chan error, 1)
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			go func() { ended <- cmd.Wait() }()
			var werr error
			select {
			case werr = <-ended:
			case <-time.After(10 * time.Second):
				t.Fatalf("%v: still running 10 s after it; stderr: %s", tc.sig, stderr.String())
			}
			took := time.Since(sent)
			t.Logf("%v: ended in %v", tc.sig, took.Round(time.Millisecond))
			if took > within {
				t.Errorf("%v: ended in %v, want within %v", tc.sig, took.Round(time.Millisecond), within)
			}
			status := 0
			var exit *exec.ExitError
			if errors.As(werr, &exit) {
				status = exit.ExitCode()
			} else if werr != nil {
				t.Fatal(werr)
			}
			if status != tc.status {
				t.Errorf("%v: exit status %d, want %d", tc.sig, status, tc.status)
			}
			if !strings.Contains(stderr.String(), tc.say) {
				t.Errorf("%v: standard error %q, want a line %q", tc.sig, stderr.String(), tc.say)
			}
			for _, pid := range kids {
				if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
					t.Errorf("its downstream process %d is still there (kill -0: %v)", pid, err)
				}
			}
			if left := running(bin); len(left) > 0 {
				t.Errorf("processes of the lab's binary still running: %v", left)
			}
		})
	}
}

// waitChildren waits for the lab (pid) to have started a process of its
// own binary, and returns their ids.
func waitChildren(t *testing.T, pid int, bin string) []int {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc to find the lab's downstream process in")
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var kids []int
		for _, p := range running(bin) {
			if parent(p) == pid {
				kids = append(kids, p)
			}
		}
		if len(kids) > 0 {
			return kids
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the lab started no downstream process within 30 s")
	return nil
}

// running lists the processes running bin (by /proc/PID/cmdline, empty
// for a zombie); none where there is no /proc.
func running(bin string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if arg0, _, _ := strings.Cut(string(cmdline), "\x00"); arg0 == bin {
			pids = append(pids, pid)
		}
	}
	return pids
}

// parent is pid's parent process id (0 if unknown).
func parent(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// syncBuffer is a bytes.Buffer safe for a process's writes and the test's
// reads at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
