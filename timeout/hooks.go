package timeout

import (
	"time"

	"github.com/callguard/callguard/internal/bridge"
)

func init() {
	bridge.TimeoutPatience = func(t any) time.Duration { return t.(*Policy).patience() }
	bridge.TimeoutOf = func(p any) *bridge.Timeout { return &p.(*Policy).x }
}

// bridged returns what the chain knows of p (see bridge.Timeout).
func (p *Policy) bridged() bridge.Timeout {
	x := bridge.Timeout{
		D:        p.d,
		Cause:    p.cause,
		NewCause: func(d time.Duration) error { return &Error{Timeout: d} },
	}
	x.Declared = p.declared
	if t := p.adaptive; t != nil {
		x.Adaptive, x.Current, x.Start, x.Observe = true, t.current, t.start, p.observe
		x.Min, x.Max = t.min, t.max
	}
	return x
}

// patience is how long a healthy downstream may take to answer: the
// highest declared quantile's latency, the adaptive timeout's estimate of
// its quantile, or half the timeout.
func (p *Policy) patience() time.Duration {
	if n := len(p.declared); n > 0 {
		return p.declared[n-1].Latency // sorted by Q
	}
	if p.adaptive != nil {
		return time.Duration(float64(p.adaptive.current()) / p.adaptive.mult)
	}
	return p.d / 2
}
