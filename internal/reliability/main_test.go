package reliability

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// downstreamEnv, set to "http" or "grpc", makes the test binary a
// downstream server instead (see startDownstream): it listens on
// downstreamAddrEnv, says "ready <addr>" on its standard output, and
// serves until it is killed.
const (
	downstreamEnv     = "CALLGUARD_RELIABILITY_DOWNSTREAM"
	downstreamAddrEnv = "CALLGUARD_RELIABILITY_ADDR"
)

func TestMain(m *testing.M) {
	if proto := os.Getenv(downstreamEnv); proto != "" {
		os.Exit(serveDownstream(proto, os.Getenv(downstreamAddrEnv)))
	}
	os.Exit(m.Run())
}

// serveDownstream is the downstream process: gRPC's health service, or an
// HTTP server answering 200 "ok".
func serveDownstream(proto, addr string) int {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "downstream:", err)
		return 1
	}
	fmt.Println("ready", lis.Addr())
	switch proto {
	case "grpc":
		srv := grpc.NewServer()
		healthpb.RegisterHealthServer(srv, health.NewServer())
		err = srv.Serve(lis)
	default:
		err = http.Serve(lis, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	}
	fmt.Fprintln(os.Stderr, "downstream:", err)
	return 1
}
