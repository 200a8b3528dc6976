package spec

import (
	"time"

	"github.com/callguard/callguard/timeout"
	"go.yaml.in/yaml/v3"
)

// timeoutArgs are a timeout's arguments, as the file gives them.
type timeoutArgs struct {
	d        time.Duration
	latency  []quantile
	adaptive *timeout.AdaptiveOptions
}

func (a *timeoutArgs) options() []timeout.Option {
	var opts []timeout.Option
	for _, q := range a.latency {
		opts = append(opts, timeout.Latency(q.Q, q.Latency))
	}
	if a.adaptive != nil {
		opts = append(opts, timeout.Adaptive(*a.adaptive))
	}
	return opts
}

func (a *timeoutArgs) build() (*timeout.Policy, error) {
	return timeout.New(a.d, a.options()...)
}

// decodeTimeout reads a timeout: a duration, or a mapping with latency
// quantiles or adaptive options.
func decodeTimeout(at, n *yaml.Node, path string) (*timeoutArgs, error) {
	a := &timeoutArgs{}
	var err error
	switch n.Kind {
	case yaml.MappingNode:
	case yaml.ScalarNode:
		if a.d, err = duration(n, path); err != nil {
			return nil, err
		}
		if _, err := a.build(); err != nil {
			return nil, wrap(n, path, err)
		}
		return a, nil
	default:
		return nil, errorf(n, path, "expected a timeout (a duration, or a mapping of timeout, latency, adaptive), got %s", describe(n))
	}
	m, err := mapOf(n, path, "a timeout", "timeout", "latency", "adaptive")
	if m == nil {
		return nil, err
	}
	var bad problems
	bad.add(err)
	p := join(path, "timeout")
	v := m.val("timeout")
	if v == nil {
		bad.add(errorf(at, p, "missing: the timeout (the starting value of an adaptive one), a duration"))
		return nil, bad.err() // the rest is checked against it
	}
	if a.d, err = duration(v, p); bad.add(err) {
		return nil, bad.err()
	}
	if _, err := timeout.New(a.d); err != nil {
		bad.add(wrap(v, p, err))
		return nil, bad.err()
	}
	if v := m.val("latency"); v != nil {
		a.latency, err = decodeLatency(m.keys["latency"], v, join(path, "latency"), a.d)
		bad.add(err)
	}
	if v := m.val("adaptive"); v != nil {
		a.adaptive, err = decodeAdaptive(m.keys["adaptive"], v, join(path, "adaptive"), a.d)
		bad.add(err)
	}
	if bad.any() {
		return nil, bad.err()
	}
	if _, err := a.build(); err != nil {
		return nil, wrap(at, path, err)
	}
	return a, nil
}

// quantile is a point of the healthy latency: timeout.Latency's arguments.
type quantile struct {
	Q       float64
	Latency time.Duration
}

// decodeLatency reads the declared latency quantiles: a list of {q, latency}.
func decodeLatency(at, n *yaml.Node, path string, d time.Duration) ([]quantile, error) {
	items, err := list(n, path, "latency quantiles ({q: 0.99, latency: 200ms})")
	if err != nil {
		return nil, err
	}
	var qs []quantile
	var opts []timeout.Option
	var bad problems
	for i, item := range items {
		ip := index(path, i)
		m, err := mapOf(item, ip, "a latency quantile", "q", "latency")
		if bad.add(err) || m == nil {
			continue
		}
		missing := false
		for _, f := range []string{"q", "latency"} {
			if m.val(f) == nil {
				missing = bad.add(errorf(item, join(ip, f), "missing: a latency quantile needs q (a fraction of calls) and latency (the most they take)"))
			}
		}
		if missing {
			continue
		}
		q, qerr := number(m.val("q"), join(ip, "q"))
		l, lerr := duration(m.val("latency"), join(ip, "latency"))
		bad.add(qerr)
		bad.add(lerr)
		if qerr != nil || lerr != nil {
			continue
		}
		// Which of the two is at fault: each is tried with a valid other.
		if _, err := timeout.New(d, timeout.Latency(q, l)); err != nil {
			f := "latency"
			if _, qerr := timeout.New(d, timeout.Latency(q, time.Second)); qerr != nil {
				f = "q"
			}
			bad.add(wrap(m.val(f), join(ip, f), err))
			continue
		}
		qs = append(qs, quantile{Q: q, Latency: l})
		opts = append(opts, timeout.Latency(q, l))
	}
	if bad.any() {
		return nil, bad.err()
	}
	if _, err := timeout.New(d, opts...); err != nil {
		return nil, wrap(at, path, err)
	}
	return qs, nil
}

// adaptiveFields are the fields of an adaptive timeout.
var adaptiveFields = []string{"quantile", "multiplier", "min", "max", "window", "minSamples"}

// decodeAdaptive reads the options of an adaptive timeout, each checked on
// its own (with the defaults of the others) and then together.
func decodeAdaptive(at, n *yaml.Node, path string, d time.Duration) (*timeout.AdaptiveOptions, error) {
	m, err := mapOf(n, path, "an adaptive timeout", adaptiveFields...)
	if m == nil {
		return nil, err
	}
	var bad problems
	bad.add(err)
	o := &timeout.AdaptiveOptions{}
	for _, name := range adaptiveFields {
		v := m.val(name)
		if v == nil {
			continue
		}
		p := join(path, name)
		var one timeout.AdaptiveOptions // this field alone
		switch name {
		case "quantile":
			one.Quantile, err = number(v, p)
			o.Quantile = one.Quantile
		case "multiplier":
			one.Multiplier, err = number(v, p)
			o.Multiplier = one.Multiplier
		case "min":
			one.Min, err = duration(v, p)
			o.Min = one.Min
		case "max":
			one.Max, err = duration(v, p)
			o.Max = one.Max
		case "window":
			one.Window, err = duration(v, p)
			o.Window = one.Window
		case "minSamples":
			one.MinSamples, err = count(v, p)
			o.MinSamples = one.MinSamples
		}
		if bad.add(err) {
			continue
		}
		if _, err := timeout.New(d, timeout.Adaptive(one)); err != nil {
			bad.add(wrap(v, p, err))
		}
	}
	if bad.any() {
		return nil, bad.err()
	}
	if _, err := timeout.New(d, timeout.Adaptive(*o)); err != nil {
		return nil, wrap(at, path, err)
	}
	return o, nil
}
