package grpcmw

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/endpoint"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/roundrobin"
	"google.golang.org/grpc/serviceconfig"
)

// EndpointHealth is the per-endpoint health of the channels that use it:
// one [endpoint.Set] per channel, with the same settings. Put it on a
// channel with [EndpointHealth.DialOption], or with the interceptors'
// option [Endpoints].
//
// A service config may select the policy by itself, with its settings as
// fields (durations as in service configs, "0.5s"):
//
//	{"loadBalancingConfig": [{"callguard_endpoints": {
//	    "childPolicy": [{"round_robin": {}}],
//	    "consecutiveFailures": 5, "openTimeout": "0.5s", "maxOpenTimeout": "1s",
//	    "halfOpenProbes": 1, "halfOpenSuccesses": 1,
//	    "maxEjectionPercent": 10, "slowFactor": 3, "slowMargin": "0.02s"}}]}
//
// Each field may be left out (its default, package endpoint's); the
// child policy is round_robin unless childPolicy names another registered
// one (the first of the list that grpc-go knows). A channel's endpoints
// are then reachable only through telemetry and its breakers' settings.
type EndpointHealth struct {
	s   endpoint.Settings
	key string

	mu   sync.Mutex
	sets []*endpoint.Set
}

var (
	healthMu  sync.Mutex
	healthOf  = map[string]*EndpointHealth{} // by key: a DialOption's id, a config's JSON
	healthIDs atomic.Uint64
)

// NewEndpointHealth checks s and returns the health its channels share
// the settings of. Errors name the field (an *endpoint.Error).
func NewEndpointHealth(s endpoint.Settings) (*EndpointHealth, error) {
	if _, err := endpoint.NewSet("", s); err != nil {
		return nil, fmt.Errorf("grpcmw: NewEndpointHealth: %w", err)
	}
	h := &EndpointHealth{s: s, key: "#" + strconv.FormatUint(healthIDs.Add(1), 10)}
	healthMu.Lock()
	healthOf[h.key] = h
	healthMu.Unlock()
	return h, nil
}

// DialOption selects the policy for a channel, over round_robin, with h's
// settings: a default service config (grpc.WithDefaultServiceConfig). A
// service config from the resolver replaces it: name the policy there.
func (h *EndpointHealth) DialOption() grpc.DialOption {
	return grpc.WithDefaultServiceConfig(fmt.Sprintf(`{"loadBalancingConfig":[{%q:{"settings":%q}}]}`, BalancerName, h.key))
}

// Statuses returns the state of every endpoint of h's channels, sorted by
// channel target, then address.
func (h *EndpointHealth) Statuses() []endpoint.Status {
	h.mu.Lock()
	sets := slices.Clone(h.sets)
	h.mu.Unlock()
	var out []endpoint.Status
	for _, s := range sets {
		out = append(out, s.Statuses()...)
	}
	slices.SortStableFunc(out, func(a, b endpoint.Status) int { return strings.Compare(a.Service, b.Service) })
	return out
}

func (h *EndpointHealth) newSet(target string) (*endpoint.Set, error) {
	set, err := endpoint.NewSet(target, h.s)
	if err != nil {
		return nil, wrapErr(err)
	}
	h.mu.Lock()
	h.sets = append(h.sets, set)
	h.mu.Unlock()
	return set, nil
}

// drop forgets set, whose channel closed.
func (h *EndpointHealth) drop(set *endpoint.Set) {
	h.mu.Lock()
	h.sets = slices.DeleteFunc(h.sets, func(s *endpoint.Set) bool { return s == set })
	h.mu.Unlock()
}

// lbConfig is the policy's parsed configuration.
type lbConfig struct {
	serviceconfig.LoadBalancingConfig
	child       balancer.Builder
	childConfig serviceconfig.LoadBalancingConfig
	health      *EndpointHealth
}

// lbJSON is the policy's configuration in a service config.
type lbJSON struct {
	ChildPolicy         []map[string]json.RawMessage `json:"childPolicy"`
	Settings            string                       `json:"settings"`
	ConsecutiveFailures int                          `json:"consecutiveFailures"`
	OpenTimeout         string                       `json:"openTimeout"`
	MaxOpenTimeout      string                       `json:"maxOpenTimeout"`
	HalfOpenProbes      int                          `json:"halfOpenProbes"`
	HalfOpenSuccesses   int                          `json:"halfOpenSuccesses"`
	MaxEjectionPercent  int                          `json:"maxEjectionPercent"`
	SlowFactor          float64                      `json:"slowFactor"`
	SlowMargin          string                       `json:"slowMargin"`
}

func (lbBuilder) ParseConfig(raw json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	return parseLBConfig(raw)
}

func parseLBConfig(raw json.RawMessage) (*lbConfig, error) {
	var j lbJSON
	if len(raw) > 0 {
		d := json.NewDecoder(strings.NewReader(string(raw)))
		d.DisallowUnknownFields()
		if err := d.Decode(&j); err != nil {
			return nil, wrapErr(fmt.Errorf("config: %w", err))
		}
	}
	cfg := &lbConfig{child: balancer.Get(roundrobin.Name)}
	chosen := false
	for _, c := range j.ChildPolicy {
		if len(c) != 1 {
			return nil, wrapErr(fmt.Errorf("config: childPolicy: each entry names one policy, got %d", len(c)))
		}
		for name, craw := range c {
			b := balancer.Get(name)
			if b == nil {
				continue
			}
			cfg.child, chosen = b, true
			if p, ok := b.(balancer.ConfigParser); ok {
				cc, err := p.ParseConfig(craw)
				if err != nil {
					return nil, wrapErr(fmt.Errorf("config: childPolicy %s: %w", name, err))
				}
				cfg.childConfig = cc
			}
		}
		if chosen {
			break
		}
	}
	if len(j.ChildPolicy) > 0 && !chosen {
		return nil, wrapErr(fmt.Errorf("config: childPolicy: no policy of the list is registered"))
	}
	key := j.Settings
	if key == "" {
		j.ChildPolicy = nil
		b, _ := json.Marshal(j)
		key = string(b)
	}
	healthMu.Lock()
	h := healthOf[key]
	healthMu.Unlock()
	if h != nil {
		cfg.health = h
		return cfg, nil
	}
	if j.Settings != "" {
		return nil, errNoHealth
	}
	var s endpoint.Settings
	s.Breaker.ConsecutiveFailures = j.ConsecutiveFailures
	s.Breaker.HalfOpenProbes = j.HalfOpenProbes
	s.Breaker.HalfOpenSuccesses = j.HalfOpenSuccesses
	s.MaxEjectionPercent = j.MaxEjectionPercent
	s.SlowFactor = j.SlowFactor
	for _, d := range []struct {
		field, v string
		to       *time.Duration
	}{{"openTimeout", j.OpenTimeout, &s.Breaker.OpenTimeout}, {"maxOpenTimeout", j.MaxOpenTimeout, &s.Breaker.MaxOpenTimeout}, {"slowMargin", j.SlowMargin, &s.SlowMargin}} {
		if d.v == "" {
			continue
		}
		v, err := time.ParseDuration(d.v)
		if err != nil {
			return nil, wrapErr(fmt.Errorf("config: %s: %w", d.field, err))
		}
		*d.to = v
	}
	h, err := NewEndpointHealth(s)
	if err != nil {
		return nil, wrapErr(fmt.Errorf("config: %w", err))
	}
	healthMu.Lock()
	if prev := healthOf[key]; prev != nil {
		h = prev // another channel parsed the same config first
	} else {
		healthOf[key] = h
	}
	healthMu.Unlock()
	cfg.health = h
	return cfg, nil
}

// Endpoints puts h's policy on the channels of the interceptors'
// DialOptions: a breaker per endpoint below the chain (see BalancerName),
// and a retry or hedge of a call sent to an endpoint its earlier attempts
// did not try.
func Endpoints(h *EndpointHealth) Option {
	return optionFunc(func(c *config) {
		if h == nil {
			c.Fail("Endpoints(nil): make one with NewEndpointHealth")
			return
		}
		c.endpoints = h
	})
}
