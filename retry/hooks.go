package retry

import "github.com/callguard/callguard/internal/bridge"

func init() {
	bridge.RetryBudget = func(p any) (ratio, perSecond, burst float64, ok bool) {
		b := p.(*Policy).budget
		if b == nil {
			return 0, 0, 0, false
		}
		return b.ratio, b.perSecond, 100*b.ratio + b.perSecond, true
	}
	bridge.RetryOf = func(p any) *bridge.Retry {
		q := p.(*Policy)
		if q.x.DoUntil == nil { // the zero Policy
			x := q.bridged()
			return &x
		}
		return &q.x
	}
}

// bridged returns what the chain and the adapters know of p (see
// bridge.Retry): method values made once, so a chain calls them with no
// allocation.
func (p *Policy) bridged() bridge.Retry {
	x := bridge.Retry{DoUntil: p.doUntil, Continue: p.cont, Waits: p.waits, Attempts: p.attempts, WhenOpen: p.whenOpen}
	if p.budget != nil {
		x.Deposit = p.budget.deposit
	}
	return x
}
