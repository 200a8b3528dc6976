package spec

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
	"go.yaml.in/yaml/v3"
)

// entry is one policy of the chain: its constructor's arguments, from
// which build makes a new policy each time.
type entry struct {
	line     int    // of the policy's name
	path     string // chain[i].name
	retry    *retryArgs
	breaker  *breaker.Settings
	timeout  *timeoutArgs
	hedge    *hedge.Settings
	throttle *throttle.Settings
	limit    *limit.Settings
	bulkhead *limit.BulkheadSettings
}

// build makes the entry's policy; src, if not nil, is the source of its
// randomness (a retry's jitter, a throttle's draws): see Spec.Seeded.
func (e entry) build(src rand.Source) (chain.Policy, error) {
	var (
		p   chain.Policy
		err error
	)
	switch {
	case e.retry != nil:
		var r *retry.Policy
		if r, err = e.retry.build(src); err == nil {
			p = r
		}
	case e.breaker != nil:
		var b *breaker.Breaker
		if b, err = breaker.New(*e.breaker); err == nil {
			p = b
		}
	case e.timeout != nil:
		var t *timeout.Policy
		if t, err = e.timeout.build(); err == nil {
			p = t
		}
	case e.hedge != nil:
		var h *hedge.Policy
		if h, err = hedge.New(*e.hedge); err == nil {
			p = h
		}
	case e.throttle != nil:
		var t *throttle.Throttle
		st := *e.throttle
		if src != nil && st.Rand == nil {
			st.Rand = src
		}
		if t, err = throttle.New(st); err == nil {
			p = t
		}
	case e.limit != nil:
		var l *limit.Limiter
		if l, err = limit.New(*e.limit); err == nil {
			p = l
		}
	case e.bulkhead != nil:
		var b *limit.Bulkhead
		if b, err = limit.NewBulkhead(*e.bulkhead); err == nil {
			p = b
		}
	default:
		err = errors.New("no policy")
	}
	if err != nil {
		return nil, &Error{Line: e.line, Path: e.path, Err: err}
	}
	return p, nil
}

var policyNames = []string{"timeout", "retry", "breaker", "throttle", "hedge", "limit", "bulkhead"}

// policyAliases are other names of the policies, lower-cased, that their
// letters alone would not suggest.
var policyAliases = map[string]string{"timelimiter": "timeout", "deadline": "timeout", "backoff": "retry"}

// decodeEntry reads one item of chain: a mapping of exactly one policy.
func decodeEntry(n *yaml.Node, path string) (entry, error) {
	if n.Kind != yaml.MappingNode {
		return entry{}, errorf(n, path, "expected one policy (a mapping with one of %s), got %s", strings.Join(policyNames, ", "), describe(n))
	}
	switch len(n.Content) / 2 {
	case 0:
		return entry{}, errorf(n, path, "no policy: an entry is one of %s", strings.Join(policyNames, ", "))
	case 1:
	default:
		var names []string
		for i := 0; i < len(n.Content); i += 2 {
			names = append(names, deref(n.Content[i]).Value)
		}
		return entry{}, errorf(deref(n.Content[2]), path, "%d policies (%s) in one entry: an entry is exactly one policy; give each its own entry, outermost first", len(names), strings.Join(names, ", "))
	}
	k, v := deref(n.Content[0]), deref(n.Content[1])
	name := k.Value
	e := entry{line: k.Line, path: join(path, name)}
	var err error
	switch {
	case k.Kind != yaml.ScalarNode:
		return entry{}, errorf(k, path, "a policy's name must be a word, got %s", describe(k))
	case name == "fallback":
		return entry{}, errorf(k, e.path, "a fallback needs code (its answer is a Go function), so it cannot be in a file: "+
			"build the chain with the fallback outermost from Spec.Policies and Spec.Options")
	case name == "retry":
		e.retry, err = decodeRetry(k, v, e.path)
	case name == "breaker":
		e.breaker, err = decodeBreaker(k, v, e.path)
	case name == "timeout":
		e.timeout, err = decodeTimeout(k, v, e.path)
	case name == "hedge":
		e.hedge, err = decodeHedge(k, v, e.path)
	case name == "throttle":
		e.throttle, err = decodeThrottle(k, v, e.path)
	case name == "limit":
		e.limit, err = decodeLimit(k, v, e.path)
	case name == "bulkhead":
		e.bulkhead, err = decodeBulkhead(k, v, e.path)
	default:
		return entry{}, errorf(k, e.path, "unknown policy; a policy is one of %s%s", strings.Join(policyNames, ", "), nearest(name, policyNames, policyAliases))
	}
	return e, err
}

// decodeLint reads the lint's options, reporting every field at fault.
func decodeLint(n *yaml.Node, path string) (chain.Options, error) {
	var o chain.Options
	m, err := mapOf(n, path, "lint", "strict", "ignore", "maxDetection", "downstreamRecovery", "callerDeadline")
	if m == nil {
		return o, err
	}
	var p problems
	p.add(err)
	if v := m.val("strict"); v != nil {
		o.Strict, err = boolean(v, join(path, "strict"))
		p.add(err)
	}
	for _, f := range []struct {
		name string
		d    *time.Duration
	}{{"maxDetection", &o.MaxDetection}, {"downstreamRecovery", &o.DownstreamRecovery}, {"callerDeadline", &o.CallerDeadline}} {
		if v := m.val(f.name); v != nil {
			*f.d, err = duration(v, join(path, f.name))
			p.add(err)
		}
	}
	if v := m.val("ignore"); v != nil {
		p.add(decodeIgnore(v, join(path, "ignore"), &o))
	}
	return o, p.err()
}

// decodeIgnore reads the lint codes to leave out.
func decodeIgnore(v *yaml.Node, path string, o *chain.Options) error {
	items, err := list(v, path, "lint codes")
	if err != nil {
		return err
	}
	var codes []string
	for _, r := range chain.Rules() {
		codes = append(codes, r.Code)
	}
	var p problems
	for i, item := range items {
		code, err := text(item, index(path, i))
		if p.add(err) {
			continue
		}
		if !slices.Contains(codes, code) {
			p.add(errorf(item, index(path, i), "%q is not a lint code (%s…%s: see chain.Rules)%s", code, codes[0], codes[len(codes)-1], suggest(code, codes)))
			continue
		}
		o.Ignore = append(o.Ignore, code)
	}
	return p.err()
}
