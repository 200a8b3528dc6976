package spec

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The walk over the YAML node tree: each value is checked against the
// format as it is read, so an error knows the value's line and field path.
// The functions that read a mapping or a list take the value, n, and at,
// the key that names it: an error about the value as a whole (a field
// missing, settings that do not go together) is on the key's line.

const durationSyntax = "Go syntax: 300ms, 1.5s, 2m"

// problems collects what is wrong with a file, so that Parse reports every
// error, not only the first: each value is checked, and a value at fault
// stops only what depends on it.
type problems struct{ errs []*Error }

// add records err, an *Error or a list of them (nil: nothing), and
// reports whether it recorded anything.
func (p *problems) add(err error) bool {
	if err == nil {
		return false
	}
	var list errorList
	var e *Error
	switch {
	case errors.As(err, &list):
		p.errs = append(p.errs, list...)
	case errors.As(err, &e):
		p.errs = append(p.errs, e)
	default:
		p.errs = append(p.errs, &Error{Err: err})
	}
	return true
}

// any reports whether a problem was recorded.
func (p *problems) any() bool { return len(p.errs) > 0 }

// err returns nil, the one *Error, or an errorList of them in the file's
// order (by line; those the parser reported, without one, first).
func (p *problems) err() error {
	switch len(p.errs) {
	case 0:
		return nil
	case 1:
		return p.errs[0]
	}
	list := slices.Clone(p.errs)
	slices.SortStableFunc(list, func(a, b *Error) int { return cmp.Compare(a.Line, b.Line) })
	return errorList(list)
}

// errorList is several errors of one file, each an *Error, in the file's
// order: it reads one line each (a lint error of several findings, a line
// per finding), and errors.As finds the first *Error in it.
type errorList []*Error

func (l errorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the errors.
func (l errorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

func errorf(n *yaml.Node, path, format string, args ...any) error {
	return &Error{Line: n.Line, Path: path, Err: fmt.Errorf(format, args...)}
}

// wrap attributes err, from a policy's constructor, to the value n at path.
func wrap(n *yaml.Node, path string, err error) error {
	return &Error{Line: n.Line, Path: path, Err: err}
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// deref follows an alias (*name) to the anchored value (&name).
func deref(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || n.Kind == yaml.DocumentNode && len(n.Content) == 0 ||
		n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what a node holds, for the errors that say what was
// expected instead.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch tag := n.ShortTag(); tag {
		case "!!null":
			return "no value"
		case "!!bool":
			return "the boolean " + n.Value
		case "!!int", "!!float":
			return "the number " + n.Value
		case "!!str":
			return strconv.Quote(n.Value)
		default:
			return fmt.Sprintf("%q tagged %s", n.Value, tag)
		}
	}
	return "an unknown kind of value"
}

// mapping is a YAML mapping whose keys were checked against the known
// fields: each is known and given once.
type mapping struct {
	known []string              // the fields it may have
	keys  map[string]*yaml.Node // the key nodes, by name
	vals  map[string]*yaml.Node // the values, aliases followed
}

// val returns the value of field name, or nil if it is not given.
func (m *mapping) val(name string) *yaml.Node { return m.vals[name] }

// mapOf checks that n is a mapping of known fields, each given once; what
// names the mapping for the errors ("a breaker"). It returns the mapping
// of the fields it knows even when others are wrong, with the error of
// every one that is (nil: none), so that a caller reads the rest; a nil
// mapping when n is not a mapping at all.
func mapOf(n *yaml.Node, path, what string, known ...string) (*mapping, error) {
	if n.Kind != yaml.MappingNode {
		return nil, errorf(n, path, "expected %s (a mapping of %s), got %s", what, strings.Join(known, ", "), describe(n))
	}
	m := &mapping{known: known, keys: map[string]*yaml.Node{}, vals: map[string]*yaml.Node{}}
	var p problems
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.add(errorf(k, path, "a field name must be a word, got %s", describe(k)))
			continue
		}
		name := k.Value
		switch prev, ok := m.keys[name]; {
		case k.ShortTag() == "!!merge":
			p.add(errorf(k, join(path, name), "merge keys are not supported: write the fields out"))
		case !contains(known, name):
			p.add(errorf(k, join(path, name), "unknown field; %s has %s%s", what, strings.Join(known, ", "), suggest(name, known)))
		case ok:
			p.add(errorf(k, join(path, name), "given twice (first on line %d)", prev.Line))
		default:
			m.keys[name], m.vals[name] = k, v
		}
	}
	return m, p.err()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// suggest returns ` (did you mean "x"?)` for the known name closest to
// name, if one is close: the same but for case, or at most two edits away.
func suggest(name string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if strings.EqualFold(k, name) {
			return fmt.Sprintf(" (did you mean %q?)", k)
		}
		if d := distance(strings.ToLower(name), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// nearest returns ` (did you mean "x"?)` for the known name nearest to
// name, however far: the same but for case, a name other libraries give
// it (aliases, e.g. timeLimiter: timeout), one that name contains or that
// contains name (circuitBreaker: breaker), or the fewest edits away.
func nearest(name string, known []string, aliases map[string]string) string {
	if s := suggest(name, known); s != "" {
		return s
	}
	lower := strings.ToLower(name)
	if k, ok := aliases[lower]; ok {
		return fmt.Sprintf(" (did you mean %q?)", k)
	}
	best, bestD := "", math.MaxInt
	for _, k := range known {
		kl := strings.ToLower(k)
		d := distance(lower, kl)
		if strings.Contains(lower, kl) || strings.Contains(kl, lower) {
			d = -len(kl) // the longest contained name first
		}
		if d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" || bestD == math.MaxInt {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// distance is the Levenshtein distance between a and b, in bytes; long
// names are not compared (none is known).
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt
	}
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		diag := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			diag, row[j] = row[j], min(row[j]+1, row[j-1]+1, diag+cost)
		}
	}
	return row[len(b)]
}

// duration reads a Go duration string ("300ms", "1m30s"), >= 0.
func duration(n *yaml.Node, path string) (time.Duration, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, errorf(n, path, "expected a duration (%s), got %s", durationSyntax, describe(n))
	}
	switch n.ShortTag() {
	case "!!str":
	case "!!int", "!!float":
		if n.Value != "0" {
			return 0, errorf(n, path, "%s is a number, not a duration: give the unit (%s)", n.Value, durationSyntax)
		}
	default:
		return 0, errorf(n, path, "expected a duration (%s), got %s", durationSyntax, describe(n))
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, errorf(n, path, "%q is not a duration (%s)", n.Value, durationSyntax)
	}
	if d < 0 {
		return 0, errorf(n, path, "%s is negative: a duration must be >= 0", n.Value)
	}
	return d, nil
}

// count reads a whole number, such as 3 or 1e3.
func count(n *yaml.Node, path string) (int, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, errorf(n, path, "expected a whole number, got %s", describe(n))
	}
	switch n.ShortTag() {
	case "!!int":
		var v int
		if err := n.Decode(&v); err != nil {
			return 0, errorf(n, path, "%s is out of range", n.Value)
		}
		return v, nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, errorf(n, path, "expected a whole number, got %s", n.Value)
		}
		if f != math.Trunc(f) {
			return 0, errorf(n, path, "%s is not a whole number", n.Value)
		}
		if f < math.MinInt64 || f >= math.MaxInt64 {
			return 0, errorf(n, path, "%s is out of range", n.Value)
		}
		return int(f), nil
	}
	return 0, errorf(n, path, "expected a whole number, got %s", describe(n))
}

// number reads a number, such as 0.5.
func number(n *yaml.Node, path string) (float64, error) {
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!int", "!!float":
			var f float64
			if err := n.Decode(&f); err != nil {
				return 0, errorf(n, path, "%s is out of range", n.Value)
			}
			return f, nil
		}
	}
	return 0, errorf(n, path, "expected a number, got %s", describe(n))
}

// boolean reads true or false.
func boolean(n *yaml.Node, path string) (bool, error) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, nil
		}
	}
	return false, errorf(n, path, "expected true or false, got %s", describe(n))
}

// text reads a string.
func text(n *yaml.Node, path string) (string, error) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		return n.Value, nil
	}
	hint := ""
	if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!null" {
		hint = " (quote it to make it a string)"
	}
	return "", errorf(n, path, "expected a string, got %s%s", describe(n), hint)
}

// list checks that n is a list.
func list(n *yaml.Node, path, what string) ([]*yaml.Node, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, errorf(n, path, "expected a list of %s, got %s", what, describe(n))
	}
	items := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		items[i] = deref(c)
	}
	return items, nil
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }
