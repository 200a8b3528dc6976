package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGoVet, end to end: the tool built as the install builds it, run by
// go vet -vettool over analyzer/testdata's module. The recommended
// chain.New(retry, breaker, timeout), whose only finding is an info, passes:
// exit 0, nothing printed. A retry inside a breaker fails: exit 1, its
// warnings printed in the order of their lines, no info. With -infos the
// recommended chain's info is printed, and fails the build.
func TestGoVet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds callguard-vet and runs go vet: not with -short")
	}
	tool := filepath.Join(t.TempDir(), "callguard-vet")
	if out, err := exec.Command("go", "build", "-o", tool, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	vet := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command("go", append([]string{"vet", "-vettool=" + tool}, args...)...)
		cmd.Dir = filepath.Join("analyzer", "testdata")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return out.String(), 0
		case errors.As(err, &exit):
			return out.String(), exit.ExitCode()
		}
		t.Fatalf("go vet %s: %v", strings.Join(args, " "), err)
		return "", 0
	}

	if out, code := vet("./vet/canonical"); code != 0 || out != "" {
		t.Errorf("go vet -vettool over the recommended chain: exit %d, output %q; want exit 0 and no output", code, out)
	}

	out, code := vet("./vet/bad")
	if code != 1 {
		t.Errorf("go vet -vettool over a retry inside a breaker: exit %d, want 1\n%s", code, out)
	}
	found := regexp.MustCompile(`(?m)^vet/bad/bad\.go:(\d+):\d+: .*warning CG002: retry\(3\) is inside breaker`).FindAllStringSubmatch(out, -1)
	if len(found) != 2 || found[0][1] != "23" || found[1][1] != "28" {
		t.Errorf("go vet -vettool over a retry inside a breaker: want its two CG002 warnings, at lines 23 then 28; got\n%s", out)
	}
	if strings.Contains(out, "info CG") {
		t.Errorf("go vet -vettool without -infos printed an info:\n%s", out)
	}

	out, code = vet("-infos", "./vet/canonical")
	if code != 1 || !regexp.MustCompile(`(?m)^vet/canonical/canonical\.go:30:25: chain: info CG015: timeout\(1s\)`).MatchString(out) {
		t.Errorf("go vet -vettool -infos over the recommended chain: exit %d, want 1 and its info CG015\n%s", code, out)
	}
}
