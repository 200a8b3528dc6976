package shared_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server process on a free loopback port.
type redisServer struct {
	cmd  *exec.Cmd
	addr string
}

// startRedis starts redis-server on addr ("" for a free port), or skips
// the test when there is none outside CI (.ci/run installs it; CI is set
// there).
func startRedis(t testing.TB, addr string) *redisServer {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server is not on PATH in CI: %v", err)
		}
		t.Skip("no redis-server on PATH (apt-get install -y redis-server); .ci/run installs it")
	}
	if addr == "" {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = lis.Addr().String()
		lis.Close()
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(path, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &redisServer{cmd: cmd, addr: addr}
	t.Cleanup(r.kill)
	waitPing(t, addr)
	return r
}

// waitPing waits up to 10 s for the Redis at addr to answer.
func waitPing(t testing.TB, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("redis on %s did not answer", addr)
		}
	}
}

// kill ends the server at once, as a crash does.
func (r *redisServer) kill() {
	if r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
}

func (r *redisServer) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.addr, MaxRetries: -1, DialTimeout: 50 * time.Millisecond,
		ReadTimeout: 50 * time.Millisecond, WriteTimeout: 50 * time.Millisecond, MaintNotificationsConfig: noMaint()})
	t.Cleanup(func() { c.Close() })
	return c
}

func (r *redisServer) clientB(b *testing.B) *redis.Client { return r.client(b) }

// fleetRedis is where a fleet's breakers are shared: one redis-server, or
// a Cluster.
type fleetRedis interface {
	universal(t testing.TB) redis.UniversalClient
}

func (r *redisServer) universal(t testing.TB) redis.UniversalClient { return r.client(t) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
