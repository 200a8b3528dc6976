package spec

import (
	"errors"
	"strings"

	"github.com/callguard/callguard/breaker"
	"go.yaml.in/yaml/v3"
)

// breakerFields maps the file's field names to those of breaker.Settings,
// whose errors (*breaker.SettingsError) name the latter.
var breakerFields = []string{
	"name", "consecutiveFailures", "consecutiveFor", "failureRate", "window", "windowCalls", "minCalls",
	"slowCall", "slowCallRate", "openTimeout", "maxOpenTimeout", "halfOpenProbes",
	"halfOpenSuccesses", "skipHalfOpen", "engine",
}

// decodeBreaker reads a breaker's settings. A trip rule must be given: in
// a file, the Go API's default rules do not apply unseen.
func decodeBreaker(at, n *yaml.Node, path string) (*breaker.Settings, error) {
	m, err := mapOf(n, path, "a breaker", breakerFields...)
	if m == nil {
		return nil, err
	}
	var bad problems
	bad.add(err)
	s := &breaker.Settings{}
	for _, name := range breakerFields {
		v := m.val(name)
		if v == nil {
			continue
		}
		p := join(path, name)
		switch name {
		case "name":
			s.Name, err = text(v, p)
		case "consecutiveFailures":
			s.ConsecutiveFailures, err = count(v, p)
		case "consecutiveFor":
			s.ConsecutiveFor, err = duration(v, p)
		case "failureRate":
			s.FailureRate, err = number(v, p)
		case "window":
			s.Window, err = duration(v, p)
		case "windowCalls":
			s.WindowCalls, err = count(v, p)
		case "minCalls":
			s.MinCalls, err = count(v, p)
		case "slowCall":
			s.SlowCall, err = duration(v, p)
		case "slowCallRate":
			s.SlowCallRate, err = number(v, p)
		case "openTimeout":
			s.OpenTimeout, err = duration(v, p)
		case "maxOpenTimeout":
			s.MaxOpenTimeout, err = duration(v, p)
		case "halfOpenProbes":
			s.HalfOpenProbes, err = count(v, p)
		case "halfOpenSuccesses":
			s.HalfOpenSuccesses, err = count(v, p)
		case "skipHalfOpen":
			s.SkipHalfOpen, err = boolean(v, p)
		case "engine":
			s.Engine, err = engine(v, p)
		}
		bad.add(err)
	}
	if bad.any() {
		return nil, bad.err() // the settings together are checked once each value is right
	}
	const noRule = "no trip rule: give consecutiveFailures, failureRate or slowCallRate (in a file the Go API's default rules, " +
		"10 consecutive failures or 50% over 10s, do not apply unseen)"
	if m.val("consecutiveFailures") == nil && m.val("failureRate") == nil && m.val("slowCallRate") == nil {
		return nil, errorf(at, path, "%s", noRule)
	}
	if _, err := breaker.New(*s); err != nil {
		var se *breaker.SettingsError
		if errors.As(err, &se) && se.Field != "" {
			name := strings.ToLower(se.Field[:1]) + se.Field[1:]
			if v := m.val(name); v != nil {
				return nil, wrap(v, join(path, name), err)
			}
			return nil, wrap(at, join(path, name), err)
		}
		return nil, wrap(at, path, err)
	}
	if s.ConsecutiveFailures == 0 && s.FailureRate == 0 && s.SlowCallRate == 0 {
		return nil, errorf(at, path, "%s; 0 turns a rule off", noRule)
	}
	return s, nil
}

func engine(n *yaml.Node, path string) (breaker.Engine, error) {
	s, err := text(n, path)
	if err != nil {
		return 0, err
	}
	for _, e := range []breaker.Engine{breaker.EngineNative, breaker.EngineGobreaker} {
		if s == e.String() {
			return e, nil
		}
	}
	return 0, errorf(n, path, "%q is not an engine: native or gobreaker%s", s, suggest(s, []string{"native", "gobreaker"}))
}
