package etcd_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/preset"
	"github.com/callguard/callguard/timeout"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The settings docs/grpc.md gives for etcd's client: callguard's
// recommended chain per method, Range declared idempotent, a floor for
// the adaptive attempt timeout above etcd's own stalls, and a rejection
// code clientv3 does not retry.
func documented(t testing.TB, s preset.Settings, extra ...grpcmw.Option) *grpcmw.Interceptors {
	t.Helper()
	if s.MinAttemptTimeout == 0 {
		s.MinAttemptTimeout = 200 * time.Millisecond
	}
	ic, err := grpcmw.Standard(s, append([]grpcmw.Option{grpcmw.Idempotent(pb.KV_Range_FullMethodName)}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return ic
}

// calls counts, per method, the calls clientv3's retry makes into the
// chain (above) and the attempts the chain sends to the wire (below);
// streams that failed to be created, below, with their codes.
type calls struct {
	mu           sync.Mutex
	above, below map[string]int
	// The codes of the stream creations that failed, as the chain told
	// clientv3 (above) and as the wire told the chain (below).
	streamsAbove, streamsBelow map[codes.Code]int
}

// stream counts the stream creations that failed in m.
func (c *calls) stream(m map[codes.Code]int) grpc.DialOption {
	return grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			c.mu.Lock()
			m[status.Code(err)]++
			c.mu.Unlock()
		}
		return s, err
	})
}

func (c *calls) count(m map[string]int, method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m[method]++
}

func (c *calls) get(above bool, method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if above {
		return c.above[method]
	}
	return c.below[method]
}

// client is a clientv3 client of e with ic's interceptors given through
// its DialOptions, as docs/grpc.md shows; maxRetries is its
// MaxUnaryRetries (0: clientv3's default, 100).
func client(t testing.TB, e *etcd, ic *grpcmw.Interceptors, maxRetries uint) (*clientv3.Client, *calls) {
	t.Helper()
	c := &calls{above: map[string]int{}, below: map[string]int{}, streamsAbove: map[codes.Code]int{}, streamsBelow: map[codes.Code]int{}}
	opts := []grpc.DialOption{grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		c.count(c.above, method)
		return invoker(ctx, method, req, reply, cc, opts...)
	}), c.stream(c.streamsAbove)}
	if ic != nil {
		opts = append(opts, ic.DialOptions()...)
	}
	opts = append(opts,
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.count(c.below, method)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		c.stream(c.streamsBelow))
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:       []string{e.client},
		DialTimeout:     time.Second,
		DialOptions:     opts,
		MaxUnaryRetries: maxRetries,
		Logger:          zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli, c
}

func put(t testing.TB, cli *clientv3.Client, k, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, k, v); err != nil {
		t.Fatalf("Put %s: %v", k, err)
	}
}

// TestWatchSurvivesARestart: a watch through the chain, with the
// documented settings; etcd is killed (SIGKILL) and started again on
// the same ports 1.5 s later. While it is down, the chain cuts the
// watch stream's creations (each waits for a connection, clientv3 sets
// grpc.WaitForReady) and its breaker refuses them; clientv3 is told
// Unavailable each time and tries again, and the watch delivers the Put
// made after the restart.
func TestWatchSurvivesARestart(t *testing.T) {
	e := startEtcd(t)
	cli, c := client(t, e, documented(t, preset.Settings{}, grpcmw.RejectionCode(codes.FailedPrecondition)), 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := cli.Watch(ctx, "k")
	put(t, cli, "k", "before")
	if got := next(t, w); got != "before" {
		t.Fatalf("the watch's first event: %q, want before", got)
	}

	e.kill()
	time.Sleep(1500 * time.Millisecond)
	e.restart()
	plain, _ := client(t, e, nil, 0)
	put(t, plain, "k", "after")
	if got := next(t, w); got != "after" {
		t.Fatalf("the watch's event after the restart: %q, want after", got)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.streamsAbove) == 0 {
		t.Errorf("no watch creation failed while etcd was down: the chain never cut or refused one")
	}
	for code, n := range c.streamsAbove {
		if code != codes.Unavailable {
			t.Errorf("the chain told clientv3 %v for %d watch creations, want Unavailable, which it re-creates the watch on", code, n)
		}
	}
	t.Logf("the watch's creations that failed while etcd was down: %v as clientv3 was told, %v beneath the chain (the attempts the chain's timeout cut)", c.streamsAbove, c.streamsBelow)
}

// next is the watch's next event's value, within 15 s; a closed watch
// channel fails the test.
func next(t *testing.T, w clientv3.WatchChan) string {
	t.Helper()
	select {
	case r, ok := <-w:
		if !ok {
			t.Fatal("the watch channel closed: the watch ended for good")
		}
		if err := r.Err(); err != nil {
			t.Fatalf("the watch: %v", err)
		}
		if len(r.Events) == 0 {
			t.Fatalf("a watch response without events: %+v", r)
		}
		return string(r.Events[0].Kv.Value)
	case <-time.After(15 * time.Second):
		t.Fatal("no watch event within 15 s")
	}
	return ""
}

// TestRejectionFailsFast: etcd killed; Gets (1 s deadline) through the
// chain with clientv3's own retry at its default (100 retries) until the
// breaker is open, then one Get more. With the default rejection code,
// Unavailable, clientv3 retries the rejection until the deadline: the
// caller waits it all. With RejectionCode(codes.FailedPrecondition), the
// Get fails at once, one call into the chain, nothing on the wire, and
// the caller can tell it is the breaker's.
func TestRejectionFailsFast(t *testing.T) {
	e := startEtcd(t)
	for _, tc := range []struct {
		name string
		opts []grpcmw.Option
		fast bool
	}{
		{"default code", nil, false},
		{"RejectionCode(FailedPrecondition)", []grpcmw.Option{grpcmw.RejectionCode(codes.FailedPrecondition)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.kill()
			e.restart()
			cli, c := client(t, e, documented(t, preset.Settings{OpenTimeout: 10 * time.Second}, tc.opts...), 0)
			put(t, cli, "k", "v") // connected
			e.kill()
			m := pb.KV_Range_FullMethodName
			for i := range 20 {
				above, below := c.get(true, m), c.get(false, m)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				start := time.Now()
				_, err := cli.Get(ctx, "k")
				took := time.Since(start)
				cancel()
				if err == nil {
					t.Fatal("a Get succeeded with etcd killed")
				}
				calls, sent := c.get(true, m)-above, c.get(false, m)-below
				if sent > 0 {
					continue // the breaker was still closed
				}
				t.Logf("Get %d, the breaker open: %v after %v, %d calls into the chain", i+1, err, took.Round(time.Millisecond), calls)
				if tc.fast {
					if took > 500*time.Millisecond || calls != 1 || status.Code(err) != codes.FailedPrecondition || !errors.Is(err, breaker.ErrOpen) {
						t.Errorf("took %v, %d calls into the chain, code %v, ErrOpen %t; want at once, 1 call, FailedPrecondition matching breaker.ErrOpen",
							took, calls, status.Code(err), errors.Is(err, breaker.ErrOpen))
					}
				} else if took < 800*time.Millisecond || calls < 2 {
					t.Errorf("took %v, %d calls into the chain: clientv3 did not retry the rejection until the deadline (the reason RejectionCode exists)", took, calls)
				}
				return
			}
			t.Fatal("the breaker never opened in 20 Gets")
		})
	}
}

// TestOneRetryLayer: etcd frozen (SIGSTOP: connections open, nothing
// answers). With clientv3's retry at MaxUnaryRetries: 1 (one attempt:
// no retry of its own), a Put, not declared idempotent, is sent once and
// fails with the chain's timeout; a Get, declared idempotent, is sent 3
// times, callguard's retry. With clientv3's default (100 retries), the
// Put the chain's attempt timeout cut is sent again: clientv3 retries
// any DeadlineExceeded while its caller's context lives, idempotent or
// not.
func TestOneRetryLayer(t *testing.T) {
	e := startEtcd(t)
	for _, tc := range []struct {
		name       string
		maxRetries uint
		puts, gets func(int) bool
		want       string
	}{
		{"MaxUnaryRetries 1", 1, func(n int) bool { return n == 1 }, func(n int) bool { return n == 3 }, "1 Put and 3 Gets"},
		{"clientv3's default", 0, func(n int) bool { return n >= 2 }, func(n int) bool { return n >= 3 }, "the Put sent more than once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, c := client(t, e, documented(t, preset.Settings{}), tc.maxRetries)
			put(t, cli, "k", "v") // connected
			e.stop()
			defer e.resume()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, perr := cli.Put(ctx, "k", "w")
			ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, gerr := cli.Get(ctx, "k")
			puts, gets := c.get(false, pb.KV_Put_FullMethodName)-1, c.get(false, pb.KV_Range_FullMethodName)
			t.Logf("Put: %v; Get: %v; on the wire: %d Puts, %d Gets", perr, gerr, puts, gets)
			if perr == nil || gerr == nil {
				t.Fatal("a call succeeded against a frozen etcd")
			}
			if !tc.puts(puts) || !tc.gets(gets) {
				t.Errorf("%d Puts and %d Gets on the wire, want %s", puts, gets, tc.want)
			}
			if tc.maxRetries == 1 && !errors.Is(perr, timeout.ErrTimeout) {
				t.Errorf("the Put: %v, want the chain's attempt timeout (timeout.ErrTimeout)", perr)
			}
		})
	}
}
