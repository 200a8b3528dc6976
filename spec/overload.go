package spec

import (
	"errors"
	"slices"
	"strings"

	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/throttle"
	"go.yaml.in/yaml/v3"
)

// The overload policies: hedge, throttle, limit and bulkhead. Each is a
// mapping of the fields of its Go Settings but the func-typed ones, named
// alike in lowerCamelCase, and is checked by its constructor, whose error
// names the Go field: the file's field of that name is blamed.

// goField is the file's name of a Go field named in a constructor's error:
// "Settings.MinLimit" and "MinLimit" are minLimit, "AIMDSettings.BackoffRatio"
// is backoffRatio.
func goField(field string) string {
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		field = field[i+1:]
	}
	if field == "" {
		return ""
	}
	return strings.ToLower(field[:1]) + field[1:]
}

// wrapField attributes err, the constructor's error about the Go field
// field, to the file's value of that field, or to the policy's key (at)
// with the field's path when the file leaves it out (its default is at
// fault, against another field). With no field known, to the policy.
func wrapField(m *mapping, at *yaml.Node, path, field string, err error) error {
	name := goField(field)
	if name == "" || !contains(m.known, name) {
		return wrap(at, path, err)
	}
	if v := m.val(name); v != nil {
		return wrap(v, join(path, name), err)
	}
	return wrap(at, join(path, name), err)
}

// missing reports a field the constructor needs that the file left out.
func missing(m *mapping, at *yaml.Node, path, name, why string) error {
	if m.val(name) == nil {
		return errorf(at, join(path, name), "missing: %s", why)
	}
	return nil
}

// hedgeFields are the fields of hedge.Settings.
var hedgeFields = []string{
	"delay", "quantile", "window", "minSamples", "minDelay", "maxDelay", "maxHedges", "budget", "burst",
}

// decodeHedge reads a hedge's settings; delay is required.
func decodeHedge(at, n *yaml.Node, path string) (*hedge.Settings, error) {
	m, err := mapOf(n, path, "a hedge", hedgeFields...)
	if m == nil {
		return nil, err
	}
	var bad problems
	bad.add(err)
	s := &hedge.Settings{}
	for _, name := range hedgeFields {
		v := m.val(name)
		if v == nil {
			continue
		}
		p := join(path, name)
		switch name {
		case "delay":
			s.Delay, err = duration(v, p)
		case "quantile":
			s.Quantile, err = number(v, p)
		case "window":
			s.Window, err = duration(v, p)
		case "minSamples":
			s.MinSamples, err = count(v, p)
		case "minDelay":
			s.MinDelay, err = duration(v, p)
		case "maxDelay":
			s.MaxDelay, err = duration(v, p)
		case "maxHedges":
			s.MaxHedges, err = count(v, p)
		case "budget":
			s.Budget, err = number(v, p)
		case "burst":
			s.Burst, err = count(v, p)
		}
		bad.add(err)
	}
	bad.add(missing(m, at, path, "delay", "a hedge needs delay (how long an attempt runs before another starts beside it), a duration"))
	if bad.any() {
		return nil, bad.err()
	}
	if _, err := hedge.New(*s); err != nil {
		return nil, wrapField(m, at, path, hedgeField(err), err)
	}
	return s, nil
}

// hedgeField is the Go field a hedge.New error names: its errors, not
// typed, read "hedge: Settings.Delay = 0s: must be > 0".
func hedgeField(err error) string {
	const prefix = "hedge: Settings."
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return ""
	}
	field, _, ok := strings.Cut(msg[len(prefix):], " ")
	if !ok {
		return ""
	}
	return field
}

// throttleFields are the fields of throttle.Settings but IsAccepted.
var throttleFields = []string{"k", "window", "maxRejectionRate", "minRequests"}

// decodeThrottle reads a throttle's settings; throttle: {} has every
// default.
func decodeThrottle(at, n *yaml.Node, path string) (*throttle.Settings, error) {
	m, err := mapOf(n, path, "a throttle", throttleFields...)
	if m == nil {
		return nil, err
	}
	var bad problems
	bad.add(err)
	s := &throttle.Settings{}
	for _, name := range throttleFields {
		v := m.val(name)
		if v == nil {
			continue
		}
		p := join(path, name)
		switch name {
		case "k":
			s.K, err = number(v, p)
		case "window":
			s.Window, err = duration(v, p)
		case "maxRejectionRate":
			s.MaxRejectionRate, err = number(v, p)
		case "minRequests":
			s.MinRequests, err = count(v, p)
		}
		bad.add(err)
	}
	if bad.any() {
		return nil, bad.err()
	}
	if _, err := throttle.New(*s); err != nil {
		var se *throttle.SettingsError
		if errors.As(err, &se) {
			return nil, wrapField(m, at, path, se.Field, err)
		}
		return nil, wrap(at, path, err)
	}
	return s, nil
}

// The algorithms of a limit, and the fields of each.
var (
	limitAlgorithms = []string{"gradient2", "aimd"}
	gradient2Fields = []string{"smoothing", "queueSize", "tolerance", "longWindow", "shortWindow", "deadlineShare"}
	aimdFields      = []string{"backoffRatio"}
	limitFields     = slices.Concat([]string{"algorithm", "initialLimit", "minLimit", "maxLimit", "maxQueue", "maxWait"},
		gradient2Fields, aimdFields)
)

// decodeLimit reads a limiter's settings: limit.Settings but IsDrop, with
// the algorithm by name (gradient2, the default, or aimd) and its settings
// beside the limiter's.
func decodeLimit(at, n *yaml.Node, path string) (*limit.Settings, error) {
	m, err := mapOf(n, path, "a limit", limitFields...)
	if m == nil {
		return nil, err
	}
	var bad problems
	bad.add(err)
	alg, algBad := "gradient2", false
	if v := m.val("algorithm"); v != nil {
		p := join(path, "algorithm")
		if alg, err = text(v, p); err != nil {
			algBad = bad.add(err)
		} else if !contains(limitAlgorithms, alg) {
			algBad = bad.add(errorf(v, p, "%q is not an algorithm: gradient2 or aimd%s", alg, suggest(alg, limitAlgorithms)))
		}
		if algBad {
			alg = "gradient2" // to read the rest; which settings belong is unknown
		}
	}
	// The other algorithm's settings are an error: they would be ignored.
	other, otherName := aimdFields, "aimd"
	if alg == "aimd" {
		other, otherName = gradient2Fields, "gradient2"
	}
	for _, name := range other {
		if m.val(name) != nil && !algBad {
			bad.add(errorf(m.keys[name], join(path, name), "a setting of algorithm %s, and the algorithm is %s (set algorithm: %s, or leave %s out)", otherName, alg, otherName, name))
		}
	}
	s := &limit.Settings{}
	var g limit.Gradient2Settings
	var a limit.AIMDSettings
	for _, name := range limitFields {
		v := m.val(name)
		if v == nil || name == "algorithm" {
			continue
		}
		p := join(path, name)
		switch name {
		case "initialLimit":
			s.InitialLimit, err = count(v, p)
		case "minLimit":
			s.MinLimit, err = count(v, p)
		case "maxLimit":
			s.MaxLimit, err = count(v, p)
		case "maxQueue":
			s.MaxQueue, err = count(v, p)
		case "maxWait":
			s.MaxWait, err = duration(v, p)
		case "smoothing":
			g.Smoothing, err = number(v, p)
		case "queueSize":
			g.QueueSize, err = count(v, p)
		case "tolerance":
			g.Tolerance, err = number(v, p)
		case "longWindow":
			g.LongWindow, err = count(v, p)
		case "shortWindow":
			g.ShortWindow, err = count(v, p)
		case "deadlineShare":
			g.DeadlineShare, err = number(v, p)
		case "backoffRatio":
			a.BackoffRatio, err = number(v, p)
		}
		bad.add(err)
	}
	if bad.any() {
		return nil, bad.err()
	}
	// An Algorithm is an immutable value: each limiter built from s keeps
	// its own state.
	s.Algorithm = limit.Gradient2(g)
	if alg == "aimd" {
		s.Algorithm = limit.AIMD(a)
	}
	if _, err := limit.New(*s); err != nil {
		return nil, wrapLimit(m, at, path, err)
	}
	return s, nil
}

// bulkheadFields are the fields of limit.BulkheadSettings.
var bulkheadFields = []string{"maxConcurrent", "maxQueue", "maxWait"}

// decodeBulkhead reads a bulkhead's settings; maxConcurrent is required.
func decodeBulkhead(at, n *yaml.Node, path string) (*limit.BulkheadSettings, error) {
	m, err := mapOf(n, path, "a bulkhead", bulkheadFields...)
	if m == nil {
		return nil, err
	}
	var bad problems
	bad.add(err)
	s := &limit.BulkheadSettings{}
	for _, name := range bulkheadFields {
		v := m.val(name)
		if v == nil {
			continue
		}
		p := join(path, name)
		switch name {
		case "maxConcurrent":
			s.MaxConcurrent, err = count(v, p)
		case "maxQueue":
			s.MaxQueue, err = count(v, p)
		case "maxWait":
			s.MaxWait, err = duration(v, p)
		}
		bad.add(err)
	}
	bad.add(missing(m, at, path, "maxConcurrent", "a bulkhead needs maxConcurrent (the calls in flight at once), a whole number >= 1"))
	if bad.any() {
		return nil, bad.err()
	}
	if _, err := limit.NewBulkhead(*s); err != nil {
		return nil, wrapLimit(m, at, path, err)
	}
	return s, nil
}

// wrapLimit attributes an error of limit.New or limit.NewBulkhead, a
// *limit.SettingsError naming e.g. "Settings.MaxWait" or
// "Gradient2Settings.Smoothing".
func wrapLimit(m *mapping, at *yaml.Node, path string, err error) error {
	var se *limit.SettingsError
	if errors.As(err, &se) {
		return wrapField(m, at, path, se.Field, err)
	}
	return wrap(at, path, err)
}
