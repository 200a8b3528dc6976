package telemetry

import (
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
)

// DefaultPort is the port of a URL's scheme, for a host without one: 443
// for https (and wss), 80 for http (and ws), 0 (none) for any other.
func DefaultPort(scheme string) int {
	switch strings.ToLower(scheme) {
	case "https", "wss":
		return 443
	case "http", "ws":
		return 80
	}
	return 0
}

// splitHostPort splits a URL's host ("host", "host:port", "[::1]:port",
// "[::1]") into its host, without brackets, and its port: defaultPort when
// it has none or an invalid one (0: none).
func splitHostPort(target string, defaultPort int) (string, int) {
	host, port := target, ""
	if i := strings.LastIndexByte(target, ':'); i >= 0 && strings.IndexByte(target[i:], ']') < 0 {
		host, port = target[:i], target[i+1:]
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if p, err := strconv.Atoi(port); err == nil && p > 0 && p <= 65535 {
		return host, p
	}
	return host, defaultPort
}

// targetAttrs appends the attributes of target to attrs: attr (rpc.method)
// = target, or for server.address the host in server.address and its port
// (defaultPort without one; 0: none) in server.port, as OpenTelemetry's
// semantic conventions have them.
func targetAttrs(attrs []attribute.KeyValue, attr, target string, defaultPort int) []attribute.KeyValue {
	if attr != "server.address" {
		return nonEmpty(attrs, attr, target)
	}
	host, port := splitHostPort(target, defaultPort)
	if host != "" {
		attrs = append(attrs, attribute.String("server.address", host))
	}
	if port > 0 {
		attrs = append(attrs, attribute.Int("server.port", port))
	}
	return attrs
}
