package faults

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// nginxServers is Debian's nginx serving /small and /large as static
// files, one server block (its own port on 127.0.0.1, its own access log)
// per arm, in one nginx started with a configuration and prefix of its
// own. The access logs count the attempts each received, by phase.
type nginxServers struct {
	addrs  []string
	logs   []string
	cmd    *exec.Cmd
	exited chan error // cmd's Wait
	prefix string
}

// nginxPath is nginx's path, or "" when it is not installed.
func nginxPath() string {
	p, err := exec.LookPath("nginx")
	if err != nil {
		for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx"} {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
		return ""
	}
	return p
}

func startNginx(n int) (*nginxServers, error) {
	bin := nginxPath()
	if bin == "" {
		return nil, errors.New("faults: nginx is not installed")
	}
	prefix, err := os.MkdirTemp("", "callguard-faults-nginx-")
	if err != nil {
		return nil, err
	}
	s := &nginxServers{prefix: prefix}
	fail := func(err error) (*nginxServers, error) {
		s.stop()
		return nil, err
	}
	// Run as root, nginx's workers run as nobody: they must reach the files.
	www := filepath.Join(prefix, "www")
	if err := os.MkdirAll(filepath.Join(prefix, "tmp"), 0o755); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(www, 0o755); err != nil {
		return fail(err)
	}
	if err := os.Chmod(prefix, 0o755); err != nil {
		return fail(err)
	}
	for path, body := range bodies {
		if err := os.WriteFile(filepath.Join(www, path), body, 0o644); err != nil {
			return fail(err)
		}
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, `daemon off;
master_process on;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
	client_body_temp_path %[1]s/tmp;
	access_log off;
	log_format phase '$http_x_fault_phase';
	keepalive_requests 1000000;
	default_type application/octet-stream;
`, prefix)
	for i := range n {
		addr, err := freePort()
		if err != nil {
			return fail(err)
		}
		log := filepath.Join(prefix, fmt.Sprintf("access-%d.log", i))
		s.addrs, s.logs = append(s.addrs, addr), append(s.logs, log)
		fmt.Fprintf(&conf, "\tserver { listen %s; root %s; access_log %s phase; }\n", addr, www, log)
	}
	conf.WriteString("}\n")
	confPath := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o644); err != nil {
		return fail(err)
	}
	var stderr bytes.Buffer
	s.cmd = exec.Command(bin, "-p", prefix, "-c", confPath, "-e", filepath.Join(prefix, "error.log"))
	s.cmd.Stderr = &stderr
	if err := s.cmd.Start(); err != nil {
		return fail(err)
	}
	s.exited = make(chan error, 1)
	go func() { s.exited <- s.cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for _, addr := range s.addrs {
		for {
			c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
			if err == nil {
				_ = c.Close()
				break
			}
			select {
			case err := <-s.exited:
				s.cmd = nil
				return fail(fmt.Errorf("faults: nginx exited (%v): %s", err, bytes.TrimSpace(stderr.Bytes())))
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("faults: nginx did not listen on %s within 5s: %s", addr, bytes.TrimSpace(stderr.Bytes())))
			}
		}
	}
	return s, nil
}

// counts reads the access logs: the attempts each server received, by
// phase.
func (s *nginxServers) counts() ([][phases]int64, error) {
	out := make([][phases]int64, len(s.logs))
	for i, log := range s.logs {
		b, err := os.ReadFile(log)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		var c counts
		for line := range strings.Lines(string(b)) {
			c.add(strings.TrimSpace(line))
		}
		out[i] = c.snapshot()
	}
	return out, nil
}

// stop ends nginx (SIGTERM: its master stops its workers and exits) and
// removes its prefix.
func (s *nginxServers) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	_ = os.RemoveAll(s.prefix)
}

// freePort is an address on 127.0.0.1 with a port free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}
