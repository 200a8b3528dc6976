package breaker

import (
	"time"

	"github.com/callguard/callguard/internal/bridge"
)

func init() {
	bridge.BreakerOpenUntil = func(b any) time.Time {
		if b, _ := b.(*Breaker); b != nil {
			return b.openUntil()
		}
		return time.Time{}
	}
	bridge.BreakerWatch = func(b any, key string, fn any) {
		bb, _ := b.(*Breaker)
		f, _ := fn.(func(StateChange))
		if bb != nil && f != nil {
			bb.watch(key, f)
		}
	}
	bridge.BreakerMarked = func(err error) bool { return markOf(err) != markNone }
}

// watch adds fn to the receivers of the breaker's state changes, under
// key: see notifier. A breaker made by FromGobreaker reports its changes
// to its own OnStateChange only: its watchers receive nothing.
func (b *Breaker) watch(key string, fn func(StateChange)) {
	if b.adapted {
		return
	}
	b.note.watch(key, fn)
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
