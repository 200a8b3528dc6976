package grpcmw_test

import (
	"context"
	"testing"

	"github.com/callguard/callguard/endpoint"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/internal/testserver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// BenchmarkBalancer is one unary call over loopback to three healthy
// servers behind one name, through round_robin alone (impl=round_robin)
// and through callguard_endpoints over it (impl=callguard_endpoints),
// with no interceptor: what the policy adds to a real call. Compare with
//
//	benchstat -col /impl out.txt
func BenchmarkBalancer(b *testing.B) {
	var eps []resolver.Endpoint
	for range 3 {
		srv, err := testserver.NewGRPC(func(int64, string) testserver.GRPCAnswer { return testserver.GRPCAnswer{} })
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Stop()
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: srv.Addr}}})
	}
	h, err := grpcmw.NewEndpointHealth(endpoint.Settings{})
	if err != nil {
		b.Fatal(err)
	}
	for _, impl := range []struct {
		name string
		opt  grpc.DialOption
	}{
		{"round_robin", grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`)},
		{"callguard_endpoints", h.DialOption()},
	} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			r := manual.NewBuilderWithScheme("bench")
			r.InitialState(resolver.State{Endpoints: eps})
			conn, err := grpc.NewClient("bench:///backends", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r), impl.opt)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			c := healthpb.NewHealthClient(conn)
			ctx := context.Background()
			for range 100 { // every endpoint connected
				if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
