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
}
