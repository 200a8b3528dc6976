package shared_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/shared"
	"github.com/redis/go-redis/v9"
)

// redisSentinel is one master, one replica and one sentinel (redis-server
// --sentinel) on loopback ports, started by the test.
type redisSentinel struct {
	master, replica, sentinel *redisServer
}

const sentinelMaster = "fleet"

func startSentinel(t *testing.T) *redisSentinel {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server is not on PATH in CI: %v", err)
		}
		t.Skip("no redis-server on PATH (apt-get install -y redis-server)")
	}
	start := func(args ...string) *redisServer {
		port := clusterPort(t)
		cmd := exec.Command(server, append([]string{"--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no", "--dir", t.TempDir()}, args...)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		n := &redisServer{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", port)}
		t.Cleanup(n.kill)
		waitPing(t, n.addr)
		return n
	}
	rs := &redisSentinel{master: start()}
	host, port := splitAddr(rs.master.addr)
	rs.replica = start("--replicaof", host, port)
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	sp := clusterPort(t)
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`bind 127.0.0.1
port %d
sentinel monitor %s %s %s 1
sentinel down-after-milliseconds %s 500
sentinel failover-timeout %s 2000
`, sp, sentinelMaster, host, port, sentinelMaster, sentinelMaster)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(server, conf, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rs.sentinel = &redisServer{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", sp)}
	t.Cleanup(rs.sentinel.kill)
	waitPing(t, rs.sentinel.addr)
	// The replica in sync, and the sentinel knowing of it.
	m := redis.NewClient(&redis.Options{Addr: rs.master.addr})
	defer m.Close()
	s := redis.NewSentinelClient(&redis.Options{Addr: rs.sentinel.addr})
	defer s.Close()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, _ := m.Info(context.Background(), "replication").Result()
		replicas, _ := s.Replicas(context.Background(), sentinelMaster).Result()
		if strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online") && len(replicas) == 1 {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica or the sentinel not ready within 20 s: %s, %d replicas known", info, len(replicas))
		}
	}
}

func splitAddr(a string) (string, string) {
	i := strings.LastIndexByte(a, ':')
	return a[:i], a[i+1:]
}

func (rs *redisSentinel) universal(t testing.TB) redis.UniversalClient {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sentinelMaster, SentinelAddrs: []string{rs.sentinel.addr},
		MaxRetries: -1, DialTimeout: 50 * time.Millisecond, ReadTimeout: 50 * time.Millisecond, WriteTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSentinelFailover: two instances share a breaker through a master
// watched by a sentinel; the fleet opens (10 s stay), and the master is
// killed (SIGKILL). The sentinel promotes the replica; what the failover
// costs is measured: how long each instance was on its own (degraded),
// and whether the fleet's open state survived on the new master (an
// instance started after the failover starts open, and the state key
// names the same stay).
func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover in real time: not in -short")
	}
	rs := startSentinel(t)
	settings := breaker.Settings{FailureRate: 0.5, MinCalls: 20, Window: 10 * time.Second, OpenTimeout: 10 * time.Second, HalfOpenProbes: 3}
	type event struct {
		at   time.Time
		down bool
	}
	type inst struct {
		b      *breaker.Breaker
		sh     *shared.Shared
		events chan event // OnDegraded's calls, in order
	}
	newInst := func() *inst {
		in := &inst{events: make(chan event, 100)}
		in.b = must(breaker.New(settings))
		in.sh = must(shared.Share(in.b, shared.Options{Client: rs.universal(t), Name: "orders", OnDegraded: func(err error) {
			select {
			case in.events <- event{time.Now(), err != nil}:
			default:
			}
		}}))
		t.Cleanup(func() { in.sh.Close() })
		return in
	}
	a, b := newInst(), newInst()
	for range 30 {
		_ = a.b.Do(context.Background(), func(context.Context) error { return errDown })
	}
	if !waitFor(func() bool { return a.b.State() == breaker.StateOpen && b.b.State() == breaker.StateOpen }) {
		t.Fatalf("the fleet did not open: %v, %v", a.b.State(), b.b.State())
	}
	reader := redis.NewClient(&redis.Options{Addr: rs.master.addr})
	before, _ := reader.Get(context.Background(), "callguard:breaker:{orders}:state").Result()
	reader.Close()
	time.Sleep(200 * time.Millisecond) // replicated
	killed := time.Now()
	rs.master.kill()

	// The new master answers: the replica, promoted.
	promoted := redis.NewClient(&redis.Options{Addr: rs.replica.addr})
	defer promoted.Close()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		role, _ := promoted.Do(context.Background(), "ROLE").Slice()
		if len(role) > 0 && role[0] == "master" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica was not promoted within 20 s")
		}
	}
	answers := time.Since(killed)
	after, _ := promoted.Get(context.Background(), "callguard:breaker:{orders}:state").Result()

	// back is how long after the kill the instance reported itself shared
	// again; an episode before the kill (a read timeout under load) is
	// not the failover's, and is skipped. ok is false when the instance
	// was degraded and not back within 15 s.
	back := func(in *inst) (d time.Duration, ok bool) {
		down := false
		for {
			wait := 5 * time.Second // for the degradation
			if down {
				wait = 15 * time.Second // for the return
			}
			select {
			case e := <-in.events:
				switch {
				case e.at.Before(killed):
				case e.down:
					down = true
				case down:
					return e.at.Sub(killed), true
				}
			case <-time.After(wait):
				return 0, !down // never degraded: 0
			}
		}
	}
	aBack, aOK := back(a)
	bBack, bOK := back(b)
	late := newInst()
	t.Logf("the new master answered %v after the kill; instances back %v and %v after it; state key %q before, %q on the new master; an instance started after: %v",
		answers.Round(time.Millisecond), aBack.Round(time.Millisecond), bBack.Round(time.Millisecond), before, after, late.b.State())
	if after != before || !strings.HasPrefix(after, "open ") {
		t.Errorf("the state key on the new master %q, want the stay stored before the kill, %q", after, before)
	}
	if late.b.State() != breaker.StateOpen {
		t.Errorf("an instance started after the failover: %v, want open (the fleet's stay)", late.b.State())
	}
	for _, r := range []struct {
		d  time.Duration
		ok bool
	}{{aBack, aOK}, {bBack, bOK}} {
		switch d := r.d; {
		case !r.ok:
			t.Errorf("an instance still on its own 15 s after its Redis went down")
		case d > answers+3*time.Second:
			t.Errorf("an instance back %v after the kill, %v after the new master answered: want within 3 s of it", d, d-answers)
		}
	}
}
