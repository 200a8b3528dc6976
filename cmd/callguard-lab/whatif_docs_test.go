package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	whatIfMarker = "<!-- What-if: written by `go test ./cmd/callguard-lab -run TestWriteWhatIfDocs -write-docs`; TestWhatIfDocs checks it still reads as the lab prints. -->"
	whatIfFile   = "../../spec/testdata/example.yaml"
)

// whatIfCapture is what docs/lab.md shows: the lab's output for the
// example chain's blackhole and its first slowdown (every answer 100 ms
// later), the file named as from the repository's root, without the run's
// elapsed time.
func whatIfCapture(t *testing.T) string {
	t.Helper()
	_, out := whatIfRun(t, "--chain", whatIfFile, "--only", "W2,W8")
	out = strings.ReplaceAll(out, whatIfFile, strings.TrimPrefix(whatIfFile, "../../"))
	out = strings.TrimRight(out, "\n")
	if i := strings.LastIndex(out, "\n"); i >= 0 && strings.Contains(out[i:], " in ") {
		out = out[:i] // "2 scenarios in 300ms (…)."
	}
	return strings.TrimRight(out, "\n") + "\n"
}

// docsBlock returns docs/lab.md, and where its what-if block's text
// starts and ends.
func docsBlock(t *testing.T) (doc string, from, to int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "lab.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc = string(b)
	i := strings.Index(doc, whatIfMarker)
	if i < 0 {
		t.Fatal("docs/lab.md has no what-if marker")
	}
	open := strings.Index(doc[i:], "```\n")
	if open < 0 {
		t.Fatal("docs/lab.md: no block after the what-if marker")
	}
	from = i + open + len("```\n")
	end := strings.Index(doc[from:], "```\n")
	if end < 0 {
		t.Fatal("docs/lab.md: the what-if block does not end")
	}
	return doc, from, from + end
}

// TestWriteWhatIfDocs regenerates docs/lab.md's what-if run:
//
//	go test ./cmd/callguard-lab -run TestWriteWhatIfDocs -write-docs
func TestWriteWhatIfDocs(t *testing.T) {
	if !*writeDocs {
		t.Skip("with -write-docs")
	}
	out := whatIfCapture(t)
	doc, from, to := docsBlock(t)
	if err := os.WriteFile(filepath.Join("..", "..", "docs", "lab.md"), []byte(doc[:from]+out+doc[to:]), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWhatIfDocs: docs/lab.md's what-if run reads as the lab prints it
// now, its numbers aside (a retry's jitter moves them between runs).
func TestWhatIfDocs(t *testing.T) {
	doc, from, to := docsBlock(t)
	digits := regexp.MustCompile(`[0-9][0-9.,]*|-{2,}|\s+`)
	norm := func(s string) []string {
		return strings.Split(digits.ReplaceAllStringFunc(strings.TrimSpace(s), func(m string) string {
			switch {
			case m[0] == '-':
				return "-"
			case strings.TrimSpace(m) == "":
				return " "
			}
			return "#"
		}), " ")
	}
	got, want := norm(whatIfCapture(t)), norm(doc[from:to])
	if !slices.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Errorf("docs/lab.md's what-if run differs from the lab's output at word %d: %q, the lab prints %q; regenerate it:\n\tgo test ./cmd/callguard-lab -run TestWriteWhatIfDocs -write-docs",
			i, strings.Join(want[i:min(len(want), i+8)], " "), strings.Join(got[i:min(len(got), i+8)], " "))
	}
}
