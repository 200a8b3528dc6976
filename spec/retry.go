package spec

import (
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
	if a.budget {
		b, err := retry.NewBudget(a.ratio, a.perSecond)
		if err != nil {
			return nil, err
		}
		opts = append(opts, retry.WithBudget(b))
	}
	return opts, nil
}

func (a *retryArgs) build() (*retry.Policy, error) {
	opts, err := a.options()
	if err != nil {
		return nil, err
	}
	return retry.New(opts...)
}

// decodeRetry reads a retry. Each value is checked by retry's own
// constructors as it is read, so that their errors name its field.
func decodeRetry(at, n *yaml.Node, path string) (*retryArgs, error) {
	m, err := mapOf(n, path, "a retry", "attempts", "constant", "exponential", "jitter", "maxPushback", "retryWhenOpen", "fitDeadline", "budget")
	if err != nil {
		return nil, err
	}
	a := &retryArgs{}
	check := func(v *yaml.Node, p string, o retry.Option) error {
		if _, err := retry.New(o); err != nil {
			return wrap(v, p, err)
		}
		return nil
	}
	if v := m.val("attempts"); v != nil {
		p := join(path, "attempts")
		if a.attempts, err = count(v, p); err != nil {
			return nil, err
		}
		if err := check(v, p, retry.MaxAttempts(a.attempts)); err != nil {
			return nil, err
		}
	}
	c, x := m.val("constant"), m.val("exponential")
	if c != nil && x != nil {
		return nil, errorf(m.keys["exponential"], join(path, "exponential"), "give constant or exponential, not both")
	}
	if c != nil {
		a.schedule = "constant"
		if a.initial, err = duration(c, join(path, "constant")); err != nil {
			return nil, err
		}
		a.max = a.initial
	}
	if x != nil {
		p := join(path, "exponential")
		xm, err := mapOf(x, p, "an exponential schedule", "initial", "max")
		if err != nil {
			return nil, err
		}
		a.schedule = "exponential"
		for _, f := range []struct {
			name string
			d    *time.Duration
		}{{"initial", &a.initial}, {"max", &a.max}} {
			v := xm.val(f.name)
			if v == nil {
				return nil, errorf(m.keys["exponential"], join(p, f.name), "missing: exponential needs initial and max")
			}
			if *f.d, err = duration(v, join(p, f.name)); err != nil {
				return nil, err
			}
		}
		if err := check(m.keys["exponential"], p, retry.Exponential(a.initial, a.max)); err != nil {
			return nil, err
		}
	}
	if v := m.val("jitter"); v != nil {
		p := join(path, "jitter")
		if a.jitter, err = number(v, p); err != nil {
			return nil, err
		}
		if err := check(v, p, retry.Jitter(a.jitter)); err != nil {
			return nil, err
		}
		a.hasJitter = true
	}
	if v := m.val("maxPushback"); v != nil {
		if a.maxPushback, err = duration(v, join(path, "maxPushback")); err != nil {
			return nil, err
		}
		a.hasMaxPushback = true
	}
	if v := m.val("retryWhenOpen"); v != nil {
		if a.whenOpen, err = boolean(v, join(path, "retryWhenOpen")); err != nil {
			return nil, err
		}
	}
	if v := m.val("fitDeadline"); v != nil {
		if a.fit, err = boolean(v, join(path, "fitDeadline")); err != nil {
			return nil, err
		}
	}
	if v := m.val("budget"); v != nil {
		if err := decodeBudget(m.keys["budget"], v, join(path, "budget"), a); err != nil {
			return nil, err
		}
	}
	if _, err := a.build(); err != nil {
		return nil, wrap(at, path, err)
	}
	return a, nil
}

// decodeBudget reads a retry budget: NewBudget's ratio and minPerSecond.
func decodeBudget(at, n *yaml.Node, path string, a *retryArgs) error {
	m, err := mapOf(n, path, "a retry budget", "ratio", "perSecond")
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"ratio", &a.ratio}, {"perSecond", &a.perSecond}} {
		p := join(path, f.name)
		v := m.val(f.name)
		if v == nil {
			return errorf(at, p, "missing: a budget needs ratio (retries per call) and perSecond (retries a second besides)")
		}
		if *f.v, err = number(v, p); err != nil {
			return err
		}
		r, s := a.ratio, 0.0
		if f.name == "perSecond" {
			r, s = 0, a.perSecond
		}
		if _, err := retry.NewBudget(r, s); err != nil {
			return wrap(v, p, err)
		}
	}
	a.budget = true
	return nil
}
