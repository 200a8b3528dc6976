package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var writeDocs = flag.Bool("write-docs", false, "run the quick lab and write docs/lab.md's captured run and picture")

// TestWriteDocs regenerates docs/lab.md's captured run and its picture:
//
//	go test ./cmd/callguard-lab -run TestWriteDocs -write-docs
func TestWriteDocs(t *testing.T) {
	if !*writeDocs {
		t.Skip("with -write-docs")
	}
	dir := t.TempDir()
	var out, errs bytes.Buffer
	if code := run([]string{"--report", dir}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(page, []byte("<svg"))
	j := bytes.Index(page, []byte("</svg>"))
	if i < 0 || j < i {
		t.Fatal("no picture in the report")
	}
	docs := filepath.Join("..", "..", "docs")
	if err := os.MkdirAll(filepath.Join(docs, "lab"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(docs, "lab", "timeline.svg"), page[i:j+len("</svg>")], 0o644); err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- Below: written by `go test ./cmd/callguard-lab -run TestWriteDocs -write-docs`. -->"
	old, err := os.ReadFile(filepath.Join(docs, "lab.md"))
	if err != nil {
		t.Fatal(err)
	}
	intro, _, _ := strings.Cut(string(old), marker)
	doc := intro + marker + "\n\n![The first timeline of the report: A1 over HTTP, native engine](lab/timeline.svg)\n\n```\n" + out.String() + "```\n"
	if err := os.WriteFile(filepath.Join(docs, "lab.md"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}
