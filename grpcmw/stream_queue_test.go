package grpcmw_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/internal/testserver"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// realTimeout returns a channel, made outside any synctest bubble, that is
// closed after d of real time, and a func that stops it. A bubble's
// goroutine can wait on it when the bubble's clock may stand still: it
// does while a goroutine of the bubble waits for a mutex.
func realTimeout(d time.Duration) (<-chan struct{}, func()) {
	expired, stop := make(chan struct{}), make(chan struct{})
	go func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			close(expired)
		case <-stop:
		}
	}()
	return expired, func() { close(stop) }
}

// queue is a limiter or a bulkhead of one slot, with a queue.
type queue struct {
	name   string
	policy func() (chain.Policy, func(context.Context) (func(error), error), func() int) // the policy, its Acquire and Queued
}

func queues() []queue {
	const maxWait = time.Second
	return []queue{
		{"limit", func() (chain.Policy, func(context.Context) (func(error), error), func() int) {
			l := must(limit.New(limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{}), InitialLimit: 1, MinLimit: 1, MaxLimit: 1, MaxQueue: 1, MaxWait: maxWait}))
			return l, func(ctx context.Context) (func(error), error) { p, err := l.Acquire(ctx); return p.Done, err }, l.Queued
		}},
		{"bulkhead", func() (chain.Policy, func(context.Context) (func(error), error), func() int) {
			b := must(limit.NewBulkhead(limit.BulkheadSettings{MaxConcurrent: 1, MaxQueue: 1, MaxWait: maxWait}))
			return b, func(ctx context.Context) (func(error), error) { p, err := b.Acquire(ctx); return p.Done, err }, b.Queued
		}},
	}
}

// TestStreamQueuedAttemptHoldsNoLock: while a stream's retry waits for its
// new attempt's admission in a limit's or a bulkhead's queue (the slot
// taken by another call), the stream's lock is free: Header, Trailer,
// CloseSend and Context from another goroutine return at once, and the
// retry goes on when the slot frees (or, after Context, ends the stream
// without making the attempt).
func TestStreamQueuedAttemptHoldsNoLock(t *testing.T) {
	for _, q := range queues() {
		for _, tc := range []struct {
			name  string
			call  func(w healthpb.Health_WatchClient) error
			recv  codes.Code // the waiting Recv's (OK: a message)
			calls int64      // the server's, when the Recv returns
		}{
			{"Header, Trailer, CloseSend", func(w healthpb.Health_WatchClient) error {
				_, _ = w.Header()
				_ = w.Trailer()
				return w.CloseSend()
			}, codes.OK, 2},
			{"Context", func(w healthpb.Health_WatchClient) error {
				_ = w.Context()
				return nil
			}, codes.Unavailable, 1},
		} {
			t.Run(q.name+"/"+tc.name, func(t *testing.T) {
				expired, stop := realTimeout(time.Second)
				defer stop()
				synctest.Test(t, func(t *testing.T) {
					srv := testserver.NewGRPCBufconn(firstUnavailable)
					defer srv.Stop()
					policy, acquire, queued := q.policy()
					r := must(retry.New(retry.MaxAttempts(3), retry.Constant(10*time.Millisecond), retry.Jitter(0)))
					conn := must(srv.Dial(must(grpcmw.NewInterceptors(must(chain.New(r, policy)), grpcmw.AllIdempotent())).DialOptions()...))
					defer conn.Close()
					w := must(healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{}))
					start := time.Now()
					type result struct {
						err   error
						took  time.Duration
						calls int64
					}
					done := make(chan result, 1)
					go func() {
						_, err := w.Recv()
						done <- result{err, time.Since(start), srv.Received.Load()}
					}()
					synctest.Wait() // the first attempt failed and gave its slot back; the retry waits out its backoff
					release, err := acquire(context.Background())
					if err != nil {
						t.Fatalf("taking the free slot: %v", err)
					}
					const queuedFor = 100 * time.Millisecond
					time.Sleep(queuedFor) // the retry's second attempt is queued behind the slot taken
					if n := queued(); n != 1 {
						t.Fatalf("%d calls queued; want the retry's attempt", n)
					}
					var callErr error
					returned := make(chan struct{})
					go func() {
						callErr = tc.call(w)
						close(returned)
					}()
					select {
					case <-returned:
						if callErr != nil {
							t.Errorf("the call: %v; want nil", callErr)
						}
					case <-expired:
						t.Errorf("the call waited for the queued attempt's admission")
					}
					release(nil)
					<-returned
					r2 := <-done
					if status.Code(r2.err) != tc.recv || r2.took != queuedFor || r2.calls != tc.calls {
						t.Errorf("the Recv: %v after %v and %d calls; want %v after %v and %d calls", r2.err, r2.took, r2.calls, tc.recv, queuedFor, tc.calls)
					}
				})
			})
		}
	}
}
