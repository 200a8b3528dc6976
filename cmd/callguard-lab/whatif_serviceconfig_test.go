package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWhatIfServiceConfig: --service-config runs the chain a methodConfig
// converts to through the what-if, beside the recommended chain. In the
// outage, its retry of 4 attempts sends 4 calls per request without
// retryThrottling, and about 1 with it (gRPC's throttle stops retrying
// once half its tokens are gone); --method picks the methodConfig as
// grpc-go would.
func TestWhatIfServiceConfig(t *testing.T) {
	amplification := func(r *Report) float64 {
		t.Helper()
		if len(r.Tables) != 1 {
			t.Fatalf("%d tables, want 1", len(r.Tables))
		}
		for _, row := range r.Tables[0].Rows {
			if row[0].Text == rowYours && row[1].Value != nil {
				return *row[1].Value
			}
		}
		t.Fatal("no row for the service config's chain")
		return 0
	}
	r, out := whatIfRun(t, "--service-config", "testdata/serviceconfig.json", "--method", "/catalog.Catalog/Get", "--only", "W1")
	if !strings.Contains(out, "chain: timeout(3s) → retry(4)") || !strings.Contains(out, "recommended chain") {
		t.Errorf("output:\n%s\nwant the converted chain, timeout(3s) → retry(4), and the recommended chain", out)
	}
	if a := amplification(r); a > 1.2 {
		t.Errorf("with retryThrottling: %.2f calls per request in the outage, want about 1", a)
	}

	var sc map[string]any
	data, _ := os.ReadFile("testdata/serviceconfig.json")
	if err := json.Unmarshal(data, &sc); err != nil {
		t.Fatal(err)
	}
	delete(sc, "retryThrottling")
	data, _ = json.Marshal(sc)
	unthrottled := filepath.Join(t.TempDir(), "sc.json")
	if err := os.WriteFile(unthrottled, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r, _ = whatIfRun(t, "--service-config", unthrottled, "--method", "/catalog.Catalog/Get", "--only", "W1")
	if a := amplification(r); a < 3.5 {
		t.Errorf("without retryThrottling: %.2f calls per request in the outage, want about 4", a)
	}

	_, out = whatIfRun(t, "--service-config", "testdata/serviceconfig.json", "--only", "W1")
	if !strings.Contains(out, "chain: timeout(500ms)") || !strings.Contains(out, "every method") {
		t.Errorf("without --method, want the methodConfig for every method, timeout(500ms):\n%s", out)
	}
	for _, args := range [][]string{
		{"--service-config", "testdata/serviceconfig.json", "--method", "/other.Svc/M", "--chain", "x.yaml"},
		{"--service-config", "testdata/nothing.json"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code == 0 || stderr.Len() == 0 {
			t.Errorf("%v: exit %d, %q; want an error", args, code, stderr.String())
		}
	}
}

// TestWhatIfRepeatable: in virtual time, every row's randomness and the
// model's are seeded: two runs give the same numbers, cell for cell.
func TestWhatIfRepeatable(t *testing.T) {
	cells := func(args ...string) string {
		r, _ := whatIfRun(t, args...)
		var b strings.Builder
		for _, tb := range r.Tables {
			for _, row := range tb.Rows {
				for _, c := range row {
					if c.Value != nil {
						fmt.Fprintf(&b, "%s %s %g\n", tb.ID, row[0].Text, *c.Value)
					}
				}
			}
		}
		return b.String()
	}
	for _, args := range [][]string{
		{"--chain", "../../spec/testdata/example.yaml", "--only", "W1,W5,W6"},
		{"--service-config", "testdata/serviceconfig.json", "--only", "W1,W5"},
	} {
		a, b := cells(args...), cells(args...)
		if a == "" || a != b {
			t.Errorf("%v: two runs differ:\n%s\n%s", args, a, b)
		}
	}
}
