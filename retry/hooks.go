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
	bridge.ThrottleOwn = func(t any) func() {
		th := t.(*Throttle)
		th.owned = true
		return th.credit
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
	x := bridge.Retry{DoUntil: p.doUntil, Continue: p.cont, Waits: p.waits, Attempts: p.attempts, WhenOpen: p.whenOpen, Fit: p.fit,
		Retries: p.counts, BudgetTokens: p.budgetTokens}
	if p.budget != nil {
		x.Deposit = p.budget.deposit
	}
	if p.throttle != nil {
		x.Succeeded = p.throttle.succeeded
	}
	return x
}

// counts returns the retries made and the calls given up on, by reason.
func (p *Policy) counts() (uint64, map[string]uint64) {
	if p.stats == nil {
		return 0, nil
	}
	out := map[string]uint64{}
	for r := ReasonAttempts; r <= ReasonOpen; r++ {
		if n := p.stats.exhausted[r].Load(); n > 0 {
			out[r.label()] = n
		}
	}
	return p.stats.retries.Load(), out
}

// budgetTokens returns the budget's tokens now.
func (p *Policy) budgetTokens() (float64, bool) {
	if p.budget == nil {
		return 0, false
	}
	return p.budget.level(), true
}
