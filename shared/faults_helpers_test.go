package shared_test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// defaultClient is a client as docs/shared.md showed it before the budget
// was held whatever the client: go-redis's defaults (3 s read timeout, 3
// retries, context deadlines ignored on socket I/O).
func defaultClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaintNotificationsConfig: noMaint()})
	t.Cleanup(func() { c.Close() })
	return c
}

// noMaint turns off go-redis's maintenance notifications for a client
// whose connections the sharing never uses (it makes its own): their
// goroutines, started by NewClient, end at the client's first connection
// or at its Close, after the test's leak check.
func noMaint() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// instrument is an Options.Instrument that adds hooks.
func instrument(hooks ...redis.Hook) func(redis.UniversalClient) error {
	return func(c redis.UniversalClient) error {
		for _, h := range hooks {
			c.AddHook(h)
		}
		return nil
	}
}

// stop and cont pause and resume the server process (SIGSTOP, SIGCONT): a
// hung Redis, its connections open and unanswered.
func (r *redisServer) stop(t testing.TB) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.cmd.Process.Signal(syscall.SIGCONT) })
}

func (r *redisServer) cont(t testing.TB) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// slowProxy forwards loopback connections to a Redis server, holding
// every chunk of its replies for delay (0: forwarded at once).
type slowProxy struct {
	lis   net.Listener
	delay atomic.Int64 // nanoseconds
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
	once  sync.Once
}

func startSlowProxy(t testing.TB, target string) *slowProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{lis: lis}
	p.wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(s, c); s.Close() })
			p.wg.Go(func() { p.replies(c, s); c.Close() })
		}
	})
	t.Cleanup(p.close)
	return p
}

func (p *slowProxy) addr() string                { return p.lis.Addr().String() }
func (p *slowProxy) setDelay(d time.Duration)    { p.delay.Store(int64(d)) }
func (p *slowProxy) currentDelay() time.Duration { return time.Duration(p.delay.Load()) }

// replies copies s to c, each chunk held until delay after it was read.
func (p *slowProxy) replies(c, s net.Conn) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	q := make(chan chunk, 1024)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ch := range q {
			if d := time.Until(ch.at); d > 0 {
				time.Sleep(d)
			}
			if _, err := c.Write(ch.b); err != nil {
				for range q {
				}
				return
			}
		}
	})
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			q <- chunk{time.Now().Add(p.currentDelay()), append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			break
		}
	}
	close(q)
	wg.Wait()
}

func (p *slowProxy) close() {
	p.once.Do(func() {
		p.lis.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
}

// faultHook is a go-redis hook that delays every command, as a client
// that blocks whatever the caller's deadline, or drops a command that
// drop selects: the client reports success, nothing reaches Redis (a
// message lost on the way).
type faultHook struct {
	delay atomic.Int64 // nanoseconds, slept for each command or pipeline
	after bool         // the delay after Redis answered, not before sending
	drop  func(args []any) bool
}

func (h *faultHook) sleep(after bool) {
	if d := time.Duration(h.delay.Load()); d > 0 && after == h.after {
		time.Sleep(d)
	}
}

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.sleep(false)
		if h.drop != nil && h.drop(cmd.Args()) {
			return nil
		}
		err := next(ctx, cmd)
		h.sleep(true)
		return err
	}
}

func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.sleep(false)
		err := next(ctx, cmds)
		h.sleep(true)
		return err
	}
}
