package telemetry

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

// TestServerAddressAndPort: a URL's host is server.address without its
// port, and the port (or the scheme's default) is server.port, an int, as
// OpenTelemetry's conventions have them; rpc.method is the target as is.
func TestServerAddressAndPort(t *testing.T) {
	for _, c := range []struct {
		target      string
		defaultPort int
		host        string
		port        int
	}{
		{"catalog.test", 80, "catalog.test", 80},
		{"catalog.test", 0, "catalog.test", 0},
		{"catalog.test:8080", 443, "catalog.test", 8080},
		{"127.0.0.1:9000", 80, "127.0.0.1", 9000},
		{"[::1]:9000", 80, "::1", 9000},
		{"[::1]", 443, "::1", 443},
		{"catalog.test:", 80, "catalog.test", 80},
		{"(other)", 0, "(other)", 0},
	} {
		attrs := attribute.NewSet(targetAttrs(nil, "server.address", c.target, c.defaultPort)...)
		host, _ := attrs.Value("server.address")
		port, hasPort := attrs.Value("server.port")
		if host.AsString() != c.host || (c.port == 0) == hasPort || (hasPort && port.AsInt64() != int64(c.port)) || attrs.Len() != 1+btoi(c.port > 0) {
			t.Errorf("%q (default %d): %v; want server.address=%s server.port=%d", c.target, c.defaultPort, attrs.Encoded(attribute.DefaultEncoder()), c.host, c.port)
		}
	}
	if m := attribute.NewSet(targetAttrs(nil, "rpc.method", "/pkg.S/M", 0)...); m.Len() != 1 {
		t.Errorf("rpc.method: %v", m.Encoded(attribute.DefaultEncoder()))
	}
	if DefaultPort("HTTPS") != 443 || DefaultPort("http") != 80 || DefaultPort("") != 0 {
		t.Error("DefaultPort")
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
