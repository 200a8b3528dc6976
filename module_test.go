package callguard_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// coreRequires are the modules the core module may require directly: what
// its packages build on, and, for its own tests only, the OpenTelemetry
// SDK's metric reader and span recorder, and goleak (a test dependency reaches a user's
// module graph, never a user's build). Anything heavier belongs in a
// module of its own, as Redis-shared breakers are (shared/).
var coreRequires = []string{
	"github.com/cenkalti/backoff/v4",
	"github.com/sony/gobreaker/v2",
	"go.opentelemetry.io/otel",
	"go.opentelemetry.io/otel/metric",
	"go.opentelemetry.io/otel/trace",
	"go.yaml.in/yaml/v3",
	"google.golang.org/grpc",
	"google.golang.org/protobuf",
	// tests only
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/sdk/metric",
	"go.uber.org/goleak",
}

// TestCoreModuleGraph: the core module requires only coreRequires, and
// nothing in its module graph is a Redis client, so that a program that
// imports grpcmw alone gets no go-redis in its go.mod or go.sum.
func TestCoreModuleGraph(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var direct []string
	block := false
	for _, line := range strings.Split(string(mod), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			block = true
			continue
		case block && line == ")":
			block = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !block:
			continue
		}
		if f := strings.Fields(line); len(f) >= 2 && !strings.Contains(line, "// indirect") {
			direct = append(direct, f[0])
		}
	}
	if len(direct) == 0 {
		t.Fatal("go.mod: no direct requirement read")
	}
	for _, m := range direct {
		if !slices.Contains(coreRequires, m) {
			t.Errorf("go.mod requires %s, which the core module should not: a heavy optional dependency goes in a module of its own", m)
		}
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to read the module graph with")
	}
	out, err := exec.Command(goBin, "mod", "graph").CombinedOutput()
	if err != nil {
		t.Fatalf("go mod graph: %v\n%s", err, out)
	}
	for _, edge := range strings.Split(string(out), "\n") {
		if strings.Contains(edge, "redis") {
			t.Errorf("the core module's graph has %q: a Redis client reaches every user's go.sum", edge)
		}
	}
}
