package breaker

import (
	"time"

	"github.com/callguard/callguard/internal/bridge"
)

func init() {
	bridge.BreakerOpenUntil = func(b any) time.Time { return b.(*Breaker).openUntil() }
	bridge.BreakerWatch = func(b any, key string, fn any) {
		b.(*Breaker).note.watch(key, fn.(func(StateChange)))
	}
	bridge.BreakerMarked = func(err error) bool { return markOf(err) != markNone }
}

// openUntil returns the first instant at which the breaker admits a call
// again: just after the end of its open stay, or the zero time if it
// admits calls now or cannot tell.
func (b *Breaker) openUntil() time.Time {
	var until time.Time
	switch {
	case b.m != nil:
		if g := b.m.cur.Load(); g.state == StateOpen {
			until = g.expiry.Add(1) // it leaves open strictly after the stay
		}
	case b.gb != nil && !b.adapted:
		if e := b.gbOpen.Load(); e != nil {
			until = e.Until // past once the stay is over
		}
	}
	if !until.IsZero() && !time.Now().Before(until) {
		return time.Time{}
	}
	return until
}
