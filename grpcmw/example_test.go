package grpcmw_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A gRPC client whose calls go through retry → breaker → attempt timeout.
func Example() {
	// A server to talk to: grpc-go's health service on loopback.
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	r, _ := retry.New(retry.MaxAttempts(3), retry.Exponential(50*time.Millisecond, time.Second))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	attempt, _ := timeout.New(500 * time.Millisecond)
	c, _ := chain.New(r, b, attempt)

	ic, err := grpcmw.NewInterceptors(c, grpcmw.Idempotent(healthpb.Health_Check_FullMethodName))
	if err != nil {
		panic(err) // an invalid option, by name
	}
	// The interceptors, and grpc.WithDisableRetry: one retry layer, callguard's.
	conn, err := grpc.NewClient(lis.Addr().String(),
		append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println(resp.GetStatus(), err, b.State())
	// Output: SERVING <nil> closed
}
