package spec

import (
	"math/rand/v2"
	"time"

	"github.com/callguard/callguard/retry"
	"go.yaml.in/yaml/v3"
)

// retryArgs are a retry's options, as the file gives them.
type retryArgs struct {
	attempts         int           // 0: not given
	schedule         string        // "constant", "exponential" or "" (the default)
	initial, max     time.Duration // the schedule's waits (both the same for constant)
	jitter           float64
	hasJitter        bool
	maxPushback      time.Duration
	hasMaxPushback   bool
	whenOpen         bool
	fit              bool
	rejected         bool
	budget           bool
	ratio, perSecond float64
}

// options returns the retry's options, with a new budget.
func (a *retryArgs) options() ([]retry.Option, error) {
	var opts []retry.Option
	if a.attempts != 0 {
		opts = append(opts, retry.MaxAttempts(a.attempts))
	}
	switch a.schedule {
	case "constant":
		opts = append(opts, retry.Constant(a.initial))
	case "exponential":
		opts = append(opts, retry.Exponential(a.initial, a.max))
	}
	if a.hasJitter {
		opts = append(opts, retry.Jitter(a.jitter))
	}
	if a.hasMaxPushback {
		opts = append(opts, retry.MaxPushback(a.maxPushback))
	}
	if a.whenOpen {
		opts = append(opts, retry.RetryWhenOpen())
	}
	if a.fit {
		opts = append(opts, retry.FitDeadline())
	}
	if a.rejected {
		opts = append(opts, retry.RetryRejected())
	}
	if a.budget {
		b, err := retry.NewBudget(a.ratio, a.perSecond)
		if err != nil {
			return nil, err
		}
		opts = append(opts, retry.WithBudget(b))
	}
	return opts, nil
}

func (a *retryArgs) build(src rand.Source) (*retry.Policy, error) {
	opts, err := a.options()
	if err != nil {
		return nil, err
	}
	if src != nil {
		opts = append(opts, retry.Rand(src))
	}
	return retry.New(opts...)
}

// decodeRetry reads a retry. Each value is checked by retry's own
// constructors as it is read, so that their errors name its field; every
// value at fault is reported.
func decodeRetry(at, n *yaml.Node, path string) (*retryArgs, error) {
	m, err := mapOf(n, path, "a retry", "attempts", "constant", "exponential", "jitter", "maxPushback", "retryWhenOpen", "fitDeadline", "retryRejected", "budget")
	if m == nil {
		return nil, err
	}
	var bad problems
	bad.add(err)
	a := &retryArgs{}
	check := func(v *yaml.Node, p string, o retry.Option) error {
		if _, err := retry.New(o); err != nil {
			return wrap(v, p, err)
		}
		return nil
	}
	if v := m.val("attempts"); v != nil {
		p := join(path, "attempts")
		if a.attempts, err = count(v, p); !bad.add(err) {
			bad.add(check(v, p, retry.MaxAttempts(a.attempts)))
		}
	}
	c, x := m.val("constant"), m.val("exponential")
	switch {
	case c != nil && x != nil:
		bad.add(errorf(m.keys["exponential"], join(path, "exponential"), "give constant or exponential, not both"))
	case c != nil:
		a.schedule = "constant"
		a.initial, err = duration(c, join(path, "constant"))
		bad.add(err)
		a.max = a.initial
	case x != nil:
		a.schedule = "exponential"
		bad.add(decodeExponential(m.keys["exponential"], x, join(path, "exponential"), a))
	}
	if v := m.val("jitter"); v != nil {
		p := join(path, "jitter")
		if a.jitter, err = number(v, p); !bad.add(err) {
			bad.add(check(v, p, retry.Jitter(a.jitter)))
		}
		a.hasJitter = true
	}
	if v := m.val("maxPushback"); v != nil {
		a.maxPushback, err = duration(v, join(path, "maxPushback"))
		bad.add(err)
		a.hasMaxPushback = true
	}
	if v := m.val("retryWhenOpen"); v != nil {
		a.whenOpen, err = boolean(v, join(path, "retryWhenOpen"))
		bad.add(err)
	}
	if v := m.val("fitDeadline"); v != nil {
		a.fit, err = boolean(v, join(path, "fitDeadline"))
		bad.add(err)
	}
	if v := m.val("retryRejected"); v != nil {
		a.rejected, err = boolean(v, join(path, "retryRejected"))
		bad.add(err)
	}
	if v := m.val("budget"); v != nil {
		bad.add(decodeBudget(m.keys["budget"], v, join(path, "budget"), a))
	}
	if bad.any() {
		return nil, bad.err()
	}
	if _, err := a.build(nil); err != nil {
		return nil, wrap(at, path, err)
	}
	return a, nil
}

// decodeExponential reads an exponential schedule: initial and max, both
// required (at is its key).
func decodeExponential(at, x *yaml.Node, p string, a *retryArgs) error {
	xm, err := mapOf(x, p, "an exponential schedule", "initial", "max")
	if xm == nil {
		return err
	}
	var bad problems
	bad.add(err)
	for _, f := range []struct {
		name string
		d    *time.Duration
	}{{"initial", &a.initial}, {"max", &a.max}} {
		v := xm.val(f.name)
		if v == nil {
			bad.add(errorf(at, join(p, f.name), "missing: exponential needs initial and max"))
			continue
		}
		*f.d, err = duration(v, join(p, f.name))
		bad.add(err)
	}
	if bad.any() {
		return bad.err()
	}
	if _, err := retry.New(retry.Exponential(a.initial, a.max)); err != nil {
		return wrap(at, p, err)
	}
	return nil
}

// decodeBudget reads a retry budget: NewBudget's ratio and minPerSecond.
func decodeBudget(at, n *yaml.Node, path string, a *retryArgs) error {
	m, err := mapOf(n, path, "a retry budget", "ratio", "perSecond")
	if m == nil {
		return err
	}
	var bad problems
	bad.add(err)
	for _, f := range []struct {
		name string
		v    *float64
	}{{"ratio", &a.ratio}, {"perSecond", &a.perSecond}} {
		p := join(path, f.name)
		v := m.val(f.name)
		if v == nil {
			bad.add(errorf(at, p, "missing: a budget needs ratio (retries per call) and perSecond (retries a second besides)"))
			continue
		}
		if *f.v, err = number(v, p); bad.add(err) {
			continue
		}
		r, s := a.ratio, 0.0
		if f.name == "perSecond" {
			r, s = 0, a.perSecond
		}
		if _, err := retry.NewBudget(r, s); err != nil {
			bad.add(wrap(v, p, err))
		}
	}
	a.budget = true
	return bad.err()
}
