package grpcmw_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestWatchSurvivesARestart: a client library that re-creates its watch
// stream on Unavailable, as etcd's clientv3 does (and ends it for good on
// DeadlineExceeded), with grpc.WaitForReady on every call, as clientv3
// sets it. While the server is down, the chain's 30 ms attempt timeout
// cuts each creation: the caller is told Unavailable, so the library
// tries again, and once a server listens on the address again the watch
// is established and gets its first message.
func TestWatchSurvivesARestart(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // down: nobody listens
	c := must(chain.New(must(timeout.New(30 * time.Millisecond))))
	conn, err := grpc.NewClient(addr, append(must(grpcmw.NewInterceptors(c)).DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	var srv atomic.Pointer[grpc.Server]
	restart := time.AfterFunc(300*time.Millisecond, func() {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listening again on %s: %v", addr, err)
			return
		}
		s := grpc.NewServer()
		healthpb.RegisterHealthServer(s, health.NewServer())
		srv.Store(s)
		go func() { _ = s.Serve(l) }()
	})
	defer func() {
		restart.Stop()
		if s := srv.Load(); s != nil {
			s.Stop()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tries := 0
	for {
		tries++
		w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err == nil {
			msg, err := w.Recv()
			if err != nil {
				t.Fatalf("the watch's first message: %v", err)
			}
			if msg.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("the watch says %v, want SERVING", msg.GetStatus())
			}
			break
		}
		if code := status.Code(err); code != codes.Unavailable {
			t.Fatalf("try %d: %v (code %v); want Unavailable while the server is down, which the library retries", tries, err, code)
		}
	}
	if tries < 2 {
		t.Errorf("established at the first try: the server was never down to the watch")
	}
}
