package shared_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisCluster is a real Redis Cluster of three masters on loopback
// ports, started by the test (redis-server --cluster-enabled yes, then
// redis-cli --cluster create), each node in a directory of its own.
type redisCluster struct {
	nodes []*redisServer
	addrs []string
}

// startCluster starts the cluster and waits until every node says
// cluster_state:ok; t's cleanup kills the nodes.
func startCluster(t *testing.T) *redisCluster {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err == nil {
		_, err = exec.LookPath("redis-cli")
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server or redis-cli is not on PATH in CI: %v", err)
		}
		t.Skip("no redis-server or redis-cli on PATH (apt-get install -y redis-server)")
	}
	rc := &redisCluster{}
	for len(rc.addrs) < 3 {
		port := clusterPort(t)
		dir := t.TempDir()
		cmd := exec.Command(server, "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "1000", "--dir", dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		n := &redisServer{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", port)}
		t.Cleanup(n.kill)
		rc.nodes, rc.addrs = append(rc.nodes, n), append(rc.addrs, n.addr)
	}
	for _, a := range rc.addrs {
		waitPing(t, a)
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, rc.addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range rc.addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		ok := false
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !ok; time.Sleep(50 * time.Millisecond) {
			info, _ := c.ClusterInfo(context.Background()).Result()
			ok = strings.Contains(info, "cluster_state:ok")
		}
		c.Close()
		if !ok {
			t.Fatalf("cluster node %s not in cluster_state:ok within 20 s", a)
		}
	}
	return rc
}

// clusterPort is a free loopback port whose cluster bus port (+10000) is
// free too.
func clusterPort(t *testing.T) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port+10000 > 65535 {
			continue
		}
		if b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000)); err == nil {
			b.Close()
			return port
		}
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

func (rc *redisCluster) universal(t testing.TB) redis.UniversalClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.addrs, MaxRetries: -1, DialTimeout: 50 * time.Millisecond,
		ReadTimeout: 50 * time.Millisecond, WriteTimeout: 50 * time.Millisecond, MaintNotificationsConfig: noMaint()})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestClusterSlots: the cluster serves every slot, and a breaker's keys
// (their hash tag, {Name}) are in one slot.
func TestClusterSlots(t *testing.T) {
	rc := startCluster(t)
	c := rc.universal(t).(*redis.ClusterClient)
	shards, err := c.ClusterShards(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	covered, ranges := 0, 0
	for _, sh := range shards {
		for _, r := range sh.Slots {
			covered += int(r.End - r.Start + 1)
			ranges++
		}
	}
	a, _ := c.ClusterKeySlot(context.Background(), "callguard:breaker:{catalog}:state").Result()
	b, _ := c.ClusterKeySlot(context.Background(), "callguard:breaker:{catalog}:c:123").Result()
	if covered != 16384 || len(shards) != 3 || a != b {
		t.Errorf("%d slots in %d ranges over %d shards, the keys' slots %d and %d; want 16384 over 3 masters, one slot", covered, ranges, len(shards), a, b)
	}
}
