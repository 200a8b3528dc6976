package main

import (
	"slices"
	"strings"
	"testing"
)

func column(t *testing.T, tb *Table, name string) int {
	t.Helper()
	i := slices.Index(tb.Columns, name)
	if i < 0 {
		t.Fatalf("%s: no column %q in %q", tb.ID, name, tb.Columns)
	}
	return i
}

// TestC4CountsAgree: C4's timelines count what its table counts: one mark
// per call made, the rejected ones as the table's "rejected by the
// breaker", and the caption says which of them the downstream received.
func TestC4CountsAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: 10 s")
	}
	r, _ := whatIfRun(t, "--only", "C4", "--proto", "http")
	if len(r.Tables) != 1 || len(r.Tables[0].Timelines) != 2 {
		t.Fatalf("%d tables, want 1 with 2 timelines", len(r.Tables))
	}
	tb := r.Tables[0]
	made, rejected, sent := column(t, tb, "calls made"), column(t, tb, "rejected by the breaker"), column(t, tb, "calls sent")
	for i, id := range tb.Timelines {
		j := slices.IndexFunc(r.Timelines, func(tl *Timeline) bool { return tl.ID == id })
		if j < 0 {
			t.Fatalf("the table names timeline %q, not in the report", id)
		}
		tl := r.Timelines[j]
		marks, rej := 0, 0
		for _, m := range tl.Marks {
			marks += m.count()
			if m.Kind == "rejected" {
				rej += m.count()
			}
		}
		row := tb.Rows[2*i] // each measured row has the seed's under it
		if row[made].Value == nil || int(*row[made].Value) != marks || int(*row[rejected].Value) != rej {
			t.Errorf("%s: %d marks, %d rejected; the table: %s made, %s rejected", id, marks, rej, row[made].Text, row[rejected].Text)
		}
		if !strings.Contains(tl.Caption, quantity(float64(marks), "")+" calls made") || !strings.Contains(tl.Caption, "received "+row[sent].Text) {
			t.Errorf("%s: the caption %q does not give the table's %s calls made and %s sent", id, tl.Caption, row[made].Text, row[sent].Text)
		}
	}
}

// TestConfigurationsAtSeedDurations: the configurations and the lint speak
// of the seed's durations, as the tables do (the quick run scales them):
// C2's 3 s timeout, which the lint flags (CG004); C3's two configurations
// tell RetryWhenOpen apart.
func TestConfigurationsAtSeedDurations(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: 5 s")
	}
	r, _ := whatIfRun(t, "--only", "C2,C3", "--proto", "grpc")
	if len(r.Tables) != 2 {
		t.Fatalf("%d tables, want C2 and C3", len(r.Tables))
	}
	c2, c3 := r.Tables[0], r.Tables[1]
	if c2.Scale != 0.1 || len(c2.Chains) != 2 || !strings.Contains(c2.Chains[0], "timeout(3s)") || !strings.Contains(c2.Chains[0], "CG004") ||
		!strings.Contains(c2.Chains[1], "timeout(200ms)") {
		t.Errorf("C2 at scale %g: configurations %q; want timeout(3s), flagged CG004, and timeout(200ms)", c2.Scale, c2.Chains)
	}
	if !slices.ContainsFunc(c2.Findings, func(f string) bool { return strings.Contains(f, "CG004") && strings.Contains(f, "5 × 3s = 15s") }) {
		t.Errorf("C2's findings %q: want CG004 at the seed's 3 s", c2.Findings)
	}
	if len(c3.Chains) != 2 || c3.Chains[0] == c3.Chains[1] || !strings.Contains(c3.Chains[0], "with retry.RetryWhenOpen()") ||
		!strings.Contains(c3.Chains[1], "without RetryWhenOpen") {
		t.Errorf("C3's configurations %q: want them told apart by RetryWhenOpen", c3.Chains)
	}
	if !slices.ContainsFunc(c3.Findings, func(f string) bool { return strings.Contains(f, "CG001") && strings.Contains(f, "375ms") }) {
		t.Errorf("C3's findings %q: want CG001 with the seed's 375ms of backoff", c3.Findings)
	}
}
