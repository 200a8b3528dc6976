package timeout

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/callguard/callguard/internal/bridge"
)

// An adaptive timeout learns only from answers, and an attempt it cuts is
// not an answer: it tells only that the downstream took at least the
// timeout (a censored observation). When a downstream gets slower than the
// timeout, every attempt is cut and nothing the timeout sees tells
// "slower" from "hung". The scout is how it finds out: while it cuts more
// than its quantile allows (more than 1 − Quantile of the attempts since
// its first cut), one attempt at a time runs at the ceiling (Max, or the
// caller's deadline if sooner), and so does the last attempt of a retry
// outside (cut at the timeout, it would only fail sooner); while it cuts
// nearly every attempt, with no scout hung lately, every attempt does
// (storm). A scout that answers later than the
// timeout it would have had says the attempts being cut were slow
// answers, not hangs: the timeout rises at once to its answer's latency ×
// Multiplier, and stays at least there for a Window (the floor), while the
// answers now let through fill the histogram; the chain forgives the
// breakers outside the failures those cuts counted. A scout that does not
// answer by the ceiling says they were hangs: the timeout stays where it
// is, and the cuts keep counting as failures. A scout that answers sooner
// than the timeout, or fails, tells nothing: the next attempt scouts.
//
// The success path pays one atomic load (no cut pending: no scouting).

// doubt is a tracker's state of doubt: the attempts it cut since it last
// knew them for slow answers or hangs, and its scouts. A tracker makes it
// at its first cut (a key that never cuts keeps a nil pointer).
type doubt struct {
	pending atomic.Bool // cuts > 0: read on every attempt

	mu      sync.Mutex
	cuts    int64     // attempts cut since the doubt began
	answers int64     // answers since then
	since   time.Time // the first of those cuts
	scouts  int       // scouts out
	scoutAt time.Time // when the last one went out
	floor   time.Duration
	until   time.Time // the floor holds until then

	// After a scout that did not answer, the next one waits: rest, from
	// 100 ms, doubling with each such scout up to the window, and back to
	// none when a scout answers slow or the doubt clears. A scout that
	// hangs costs its call its retries; against a downstream where some
	// answers hang, the doubt never ends and scouts would go out one after
	// another.
	rest     time.Duration
	restTill time.Time
}

const firstRest = 100 * time.Millisecond

// start returns the timeout of an attempt starting now, and whether it is
// a scout: the ceiling, then. One attempt at a time is the scout; so is,
// besides, an attempt that no retry follows (last: a retry outside said
// so): cut at the timeout, it would only fail sooner.
func (t *tracker) start(ctx context.Context) (time.Duration, bool) {
	dt := t.doubt.Load()
	if dt == nil || !dt.pending.Load() {
		return t.current(), false
	}
	dt.mu.Lock()
	defer dt.mu.Unlock()
	if !t.doubting(dt) {
		return t.current(), false
	}
	now := time.Now()
	if dt.scouts > 0 && now.Sub(dt.scoutAt) > t.max && now.Sub(dt.scoutAt)-t.max > t.max {
		// Scouts out for twice their ceiling were never reported (an
		// HTTP body its caller never closed): they no longer hold the
		// slot.
		dt.scouts = 0
	}
	if !bridge.IsLastAttempt(ctx) && !t.storm(dt) && (dt.scouts > 0 || now.Before(dt.restTill)) {
		return t.current(), false
	}
	dt.scouts++
	dt.scoutAt = now
	return t.max, true
}

// doubting reports whether the cuts since the doubt began are more than
// the quantile allows; the caller holds dt.mu.
func (t *tracker) doubting(dt *doubt) bool {
	return dt.cuts > 0 && float64(dt.cuts) > (1-t.q)*float64(dt.cuts+dt.answers)
}

// storm reports that the timeout cuts nearly every attempt (at least
// stormCuts, and 9 in 10 of the attempts since the doubt began) while no scout has hung
// since the last that answered slow: the downstream got slower than the
// timeout all at once, or hangs, and every attempt scouts until the first
// verdict. An attempt cut there is lost for its request when no retry
// follows (an HTTP body read after its headers came: the response is the
// caller's by then); one that hangs costs its caller its deadline, as
// without the timeout, once, until a scout's verdict. The caller holds
// dt.mu.
func (t *tracker) storm(dt *doubt) bool {
	return dt.rest == 0 && dt.cuts >= stormCuts && dt.cuts >= 9*dt.answers
}

// stormCuts is the cuts a storm needs: a few hung answers ending together
// (callers that all began to hang at once) are not every attempt.
const stormCuts = 10

// cut records an attempt this timeout cut at now.
func (t *tracker) cut(now time.Time) {
	dt := t.doubt.Load()
	if dt == nil {
		t.doubt.CompareAndSwap(nil, new(doubt))
		dt = t.doubt.Load()
	}
	dt.mu.Lock()
	if dt.cuts == 0 {
		dt.since = now
		dt.pending.Store(true)
	}
	dt.cuts++
	dt.mu.Unlock()
}

// answered records an answer while in doubt: enough of them and the cuts
// were the tail the quantile allows.
func (t *tracker) answered(dt *doubt) {
	dt.mu.Lock()
	if dt.cuts > 0 {
		dt.answers++
		if !t.doubting(dt) && dt.scouts == 0 {
			dt.clearLocked()
		}
	}
	dt.mu.Unlock()
}

// clearLocked ends the doubt; the caller holds dt.mu.
func (dt *doubt) clearLocked() {
	dt.cuts, dt.answers, dt.since = 0, 0, time.Time{}
	dt.pending.Store(false)
}

// scouted records the end of a scout, with the timeout it would otherwise
// have had (normal), after it ran for took: it answered (answer), a
// deadline cut it (cut), or it failed.
// Its verdict: the cuts since the doubt began were slow answers (the
// failures they counted are to be forgiven), or, in a storm, hangs.
func (t *tracker) scouted(normal, took time.Duration, answer, cut bool, now time.Time) (v bridge.Verdict) {
	dt := t.doubt.Load() // not nil: a scout needs a cut
	dt.mu.Lock()
	defer dt.mu.Unlock()
	dt.scouts = max(dt.scouts-1, 0)
	switch {
	case answer && took > normal:
		// Slower than the timeout, but alive: the cut attempts were slow
		// answers. The timeout rises to this answer's.
		if dt.cuts > 0 { // else the doubt was cleared meanwhile: nothing to forgive
			v.Forgive = dt.since
		}
		f := t.max
		if v := float64(took) * t.mult; v < float64(t.max) {
			f = max(time.Duration(v), t.min)
		}
		if f > dt.floor || !now.Before(dt.until) {
			dt.floor = f
		}
		dt.until = now.Add(t.window)
		if f > t.current() {
			t.value.Store(int64(f))
		}
		dt.clearLocked()
		dt.rest, dt.restTill = 0, time.Time{}
	case cut && took >= normal:
		// Cut at the ceiling, or by the caller: the cuts were hangs (or
		// answers too slow to matter). They stay failures, and the next
		// scout rests; in a storm, the breakers need not wait out their
		// ConsecutiveFor.
		if t.storm(dt) {
			v.Hung = now.Add(-took)
		}
		dt.clearLocked()
		dt.rest = min(max(2*dt.rest, firstRest), max(t.window, firstRest))
		dt.restTill = now.Add(dt.rest)
	case answer:
		// Within the timeout: it tells nothing of the attempts cut, but it
		// is an answer the timeout would have let through, and counts as
		// one against them (in a storm every attempt scouts: without it,
		// the cut share would never fall).
		dt.answers++
		if !t.doubting(dt) && dt.scouts == 0 {
			dt.clearLocked()
		}
	}
	// Otherwise it failed (a downstream's error, not a deadline): it tells
	// nothing, and the next attempt scouts.
	return v
}

// floorNow returns the floor the last slow scout set, if it still holds.
func (t *tracker) floorNow(now time.Time) time.Duration {
	dt := t.doubt.Load()
	if dt == nil {
		return 0
	}
	dt.mu.Lock()
	defer dt.mu.Unlock()
	if now.Before(dt.until) {
		return dt.floor
	}
	return 0
}
