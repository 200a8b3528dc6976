package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/callguard/callguard/chain"
	"go.yaml.in/yaml/v3"
)

// Spec is a chain read from a file: its policies in order, outermost first,
// and the lint's options. It holds the arguments of each policy's
// constructor, never a policy: [Spec.Chain] and [Spec.Policies] make new
// policies each time, so two chains built from one Spec share no state (no
// breaker, retry budget, adaptive timeout, throttle window, hedge budget or
// limiter's slots).
//
// A Spec is immutable and safe for concurrent use. Make one with [Parse]
// or [Load], which check everything a chain built from it could fail on;
// the zero Spec has no policies, and its Chain and Policies return an
// error.
type Spec struct {
	lint    chain.Options
	line    int // of the chain: key, for the lint's errors
	entries []entry
	seeded  bool   // Seeded
	seed    uint64 // Seeded's
}

// Parse reads a spec in YAML or JSON (the format is in the package
// documentation). It checks every value and builds the chain once, so that
// anything wrong is reported now, as an [*Error] naming the line and the
// field (several errors: all of them, each an [*Error], joined: see
// "Errors" in the package documentation), and never later by [Spec.Chain].
func Parse(data []byte) (*Spec, error) {
	return parse("", data)
}

// Load reads the spec in the file at path, as [Parse] does. Its errors name
// the file: an [*Error] with File set, or the error of reading it.
func Load(path string) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	return parse(path, data)
}

func parse(file string, data []byte) (*Spec, error) {
	s, err := decode(data)
	if err != nil {
		var list errorList
		var e *Error
		switch {
		case errors.As(err, &list):
			for _, e := range list {
				e.File = file
			}
		case errors.As(err, &e):
			e.File = file
		}
		return nil, err
	}
	return s, nil
}

var errEmpty = errors.New("the document is empty: a spec needs chain: with at least one policy")

// decode parses data into a Spec: one YAML document (JSON is YAML), walked
// node by node, so that each error knows its line and field path.
func decode(data []byte) (*Spec, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := decodeNode(dec, &doc); {
	case err == io.EOF:
		return nil, &Error{Err: errEmpty}
	case err != nil:
		return nil, &Error{Err: err}
	}
	// Documents after the first (after ---) may only be empty.
	for {
		var next yaml.Node
		err := decodeNode(dec, &next)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, &Error{Err: err}
		}
		if n := rootOf(&next); !isNull(n) {
			return nil, &Error{Line: n.Line, Err: errors.New("a second document (after ---): a spec is one document")}
		}
	}
	root := rootOf(&doc)
	if isNull(root) {
		return nil, &Error{Line: root.Line, Err: errEmpty}
	}
	m, err := mapOf(root, "", "a spec", "lint", "chain")
	if m == nil {
		return nil, err
	}
	var p problems
	p.add(err)
	s := &Spec{}
	if n := m.val("lint"); n != nil {
		s.lint, err = decodeLint(n, "lint")
		p.add(err)
	}
	seq := m.val("chain")
	switch {
	case seq == nil:
		p.add(&Error{Line: root.Line, Path: "chain", Err: errors.New("missing: a spec needs chain: with at least one policy, outermost first")})
		return nil, p.err()
	case seq.Kind != yaml.SequenceNode:
		p.add(errorf(seq, "chain", "expected a list of policies, outermost first, got %s", describe(seq)))
		return nil, p.err()
	case len(seq.Content) == 0:
		p.add(errorf(seq, "chain", "empty: a chain needs at least one policy"))
		return nil, p.err()
	}
	s.line = m.keys["chain"].Line
	items, _ := list(seq, "chain", "policies")
	for i, item := range items {
		e, err := decodeEntry(item, index("chain", i))
		if !p.add(err) {
			s.entries = append(s.entries, e)
		}
	}
	if p.any() {
		return nil, p.err()
	}
	// Build the chain once: the lint's errors (Options.Strict) come now.
	if _, err := s.Chain(); err != nil {
		return nil, err
	}
	return s, nil
}

// rootOf returns the value of a document.
func rootOf(doc *yaml.Node) *yaml.Node {
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return deref(doc.Content[0])
	}
	return doc
}

// decodeNode decodes the next document into n. The YAML library reports
// bad input as errors; should it ever panic instead, Parse still returns
// an error.
func decodeNode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("yaml: %v", v)
		}
	}()
	return dec.Decode(n)
}

// Chain builds the spec's chain, with new policies, and lints it with the
// spec's options ([Spec.Options]). Each call gives a chain of its own: its
// breakers, retry budgets, adaptive timeouts and overload policies start
// afresh.
//
// For a Spec from [Parse] or [Load] it does not fail: they built the chain
// once already. To add what a file cannot hold, such as a fallback (whose
// answer is code), build the chain from [Spec.Policies] instead.
func (s *Spec) Chain() (*chain.Chain, error) {
	ps, err := s.Policies()
	if err != nil {
		return nil, err
	}
	c, err := s.Options().New(ps...)
	if err != nil {
		return nil, &Error{Line: s.line, Path: "chain", Err: err}
	}
	return c, nil
}

// Policies returns new policies for the spec's chain, outermost first:
// [*retry.Policy], [*breaker.Breaker], [*timeout.Policy],
// [*throttle.Throttle], [*hedge.Policy], [*limit.Limiter] and
// [*limit.Bulkhead] values, made afresh on each call. Use them to build a chain with more than the file
// holds, e.g. a fallback outermost:
//
//	ps, err := s.Policies()
//	…
//	c, err := s.Options().New(append([]chain.Policy{fb}, ps...)...)
func (s *Spec) Policies() ([]chain.Policy, error) {
	if s == nil || len(s.entries) == 0 {
		return nil, errors.New("spec: no policies: make a Spec with Parse or Load")
	}
	ps := make([]chain.Policy, 0, len(s.entries))
	for i, e := range s.entries {
		var src rand.Source
		if s.seeded {
			src = rand.NewPCG(s.seed, uint64(i))
		}
		p, err := e.build(src)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// Seeded returns a copy of s whose Policies and Chain draw every
// policy's randomness — a retry's jitter (retry.Rand), a throttle's
// draws (throttle.Settings.Rand, unless set) — from sources seeded with
// seed and the policy's place in the chain, new on each call: two chains
// built from it make the same waits and the same draws in the same order,
// so that a simulation (the lab's what-if) gives the same numbers every
// run. Without it, they draw from the global sources (math/rand's through
// backoff/v4 for a retry's jitter, math/rand/v2's for a throttle).
func (s *Spec) Seeded(seed uint64) *Spec {
	if s == nil {
		return nil
	}
	c := *s
	c.seeded, c.seed = true, seed
	return &c
}

// Options returns the lint's options from the spec's lint: section (the
// zero Options, the defaults, without one).
func (s *Spec) Options() chain.Options {
	if s == nil {
		return chain.Options{}
	}
	o := s.lint
	o.Ignore = slices.Clone(o.Ignore)
	return o
}

// Error is what is wrong with a spec, and where: the file (for [Load]),
// the line and the field path. It unwraps to the error of the policy's
// constructor when that rejected a value (a [*breaker.SettingsError], for
// one), so that errors.As finds it. The zero Error reads "spec: invalid".
type Error struct {
	// File is the file's path given to Load ("" for Parse).
	File string
	// Line is the line of the value at fault, from 1; 0 when the YAML
	// parser reported the error (a syntax error), whose message then says
	// the line itself, or for an empty document.
	Line int
	// Path is the field, e.g. "chain[2].breaker.openTimeout" (entries
	// counted from 0); "" for the document as a whole.
	Path string
	// Err says what is wrong.
	Err error
}

// Error reads e.g. `spec: line 7: chain[2].breaker.openTimeout: "5 secs" is
// not a duration (Go syntax: 300ms, 1.5s, 2m)`, or with the file,
// `spec: chain.yaml:7: chain[2].breaker.openTimeout: …`.
// A lint error of the chain (strict mode) reads `spec: line 3: chain:
// error CG002: …`, a line per finding, each with the file, line and path.
func (e *Error) Error() string {
	fs := findings(e.Err)
	if len(fs) == 0 {
		return e.text(e.Err)
	}
	var b bytes.Buffer
	for i, f := range fs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.text(fmt.Errorf("%s %s: %s", f.Severity, f.Code, f.Message)))
	}
	return b.String()
}

// findings returns the lint findings err is made of: a chain.Finding, or
// the errors.Join of them that chain.Options.New returns; none if err is
// anything else.
func findings(err error) []chain.Finding {
	var f chain.Finding
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var fs []chain.Finding
		for _, err := range j.Unwrap() {
			if !errors.As(err, &f) {
				return nil
			}
			fs = append(fs, f)
		}
		return fs
	}
	if errors.As(err, &f) {
		return []chain.Finding{f}
	}
	return nil
}

// text formats e with err in place of e.Err.
func (e *Error) text(err error) string {
	var b bytes.Buffer
	b.WriteString("spec: ")
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		fmt.Fprintf(&b, "%s: ", e.File)
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	if err != nil {
		b.WriteString(err.Error())
	} else {
		b.WriteString("invalid")
	}
	return b.String()
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }
