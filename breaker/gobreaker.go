package breaker

import (
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// gobreakerExpressible rejects the settings gobreaker/v2 has no equivalent for.
func gobreakerExpressible(s Settings) error {
	const why = "not expressible with EngineGobreaker; use EngineNative"
	switch {
	case s.WindowCalls > 0:
		return invalid("WindowCalls", s.WindowCalls, why)
	case s.ConsecutiveFor > 0:
		return invalid("ConsecutiveFor", s.ConsecutiveFor, why)
	case s.SlowCall > 0:
		return invalid("SlowCall", s.SlowCall, why)
	case s.MaxOpenTimeout > 0:
		return invalid("MaxOpenTimeout", s.MaxOpenTimeout, why)
	case s.SkipHalfOpen:
		return invalid("SkipHalfOpen", s.SkipHalfOpen, why)
	case s.HalfOpenSuccesses != s.HalfOpenProbes:
		return invalid("HalfOpenSuccesses", s.HalfOpenSuccesses, "must equal HalfOpenProbes with EngineGobreaker (all probes must succeed)")
	case s.FailureRate > 0 && s.Window < windowBuckets:
		return invalid("Window", s.Window, why)
	}
	// gobreaker counts in uint32, and so does the engine's run of
	// failures: a larger value would be cut to its low 32 bits.
	const wide = "above 4294967295, more than EngineGobreaker counts (uint32); use EngineNative"
	switch {
	case uint64(s.ConsecutiveFailures) > math.MaxUint32:
		return invalid("ConsecutiveFailures", s.ConsecutiveFailures, wide)
	case uint64(s.HalfOpenProbes) > math.MaxUint32:
		return invalid("HalfOpenProbes", s.HalfOpenProbes, wide)
	case uint64(s.MinCalls) > math.MaxUint32:
		return invalid("MinCalls", s.MinCalls, wide)
	}
	return nil
}

// errGobreakerFailure and errGobreakerNeutral carry callguard's
// classification into gobreaker's IsSuccessful and IsExcluded.
var (
	errGobreakerFailure = errors.New("breaker: failure")
	errGobreakerNeutral = errors.New("breaker: neutral")
)

func newGobreakerEngine(b *Breaker) *gobreaker.TwoStepCircuitBreaker[any] {
	s := &b.s // not a copy: the closures below would keep one each
	// The run of failures in a row, kept here: gobreaker's own
	// ConsecutiveFailures is cleared when its rate window rolls over, so a
	// run spread over more than the window would never trip. gobreaker
	// calls these functions under its lock, for outcomes of the current
	// state only.
	var run atomic.Uint32
	st := gobreaker.Settings{
		Name:        s.Name,
		MaxRequests: uint32(s.HalfOpenProbes), // checked by gobreakerExpressible
		Timeout:     s.OpenTimeout,
		IsSuccessful: func(err error) bool {
			if err == nil {
				run.Store(0)
				return true
			}
			run.Add(1)
			return false
		},
		IsExcluded: func(err error) bool { return err == errGobreakerNeutral },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			// Called under gobreaker's lock: only queue it.
			run.Store(0)
			if to == gobreaker.StateOpen {
				b.opens.Add(1)
				// gobreaker leaves open strictly after the stay. The error
				// stays set after the stay: a rejection that raced with
				// the end of the stay still finds it, its Until past.
				until := time.Now().Add(s.OpenTimeout).Add(1)
				b.gb.open.Store(&OpenError{Name: s.Name, Until: until})
			}
			b.push(fromGobreakerState(from), fromGobreakerState(to), time.Now())
		},
	}
	consecutive := uint32(s.ConsecutiveFailures) // gobreakerExpressible checked these fit
	rate, minCalls := s.FailureRate, uint64(s.MinCalls)
	if rate > 0 {
		st.Interval = s.Window
		st.BucketPeriod = s.Window / windowBuckets
	}
	st.ReadyToTrip = func(c gobreaker.Counts) bool {
		if consecutive > 0 && run.Load() >= consecutive {
			return true
		}
		calls := uint64(c.TotalSuccesses) + uint64(c.TotalFailures) // no wrap-around in the sum
		return rate > 0 && calls > 0 && calls >= minCalls && reached(uint64(c.TotalFailures), calls, rate)
	}
	return gobreaker.NewTwoStepCircuitBreaker[any](st)
}

// gbEngine is what a breaker on the gobreaker engine, or made by
// FromGobreaker, keeps beside its gobreaker: kept apart from Breaker so
// that a native breaker (the one a keyed set keeps per key) does not pay
// for it.
type gbEngine struct {
	cb      *gobreaker.TwoStepCircuitBreaker[any]
	adapted bool // made by FromGobreaker

	// seen is, for a breaker made by FromGobreaker, what its gobreaker
	// was after the last call through it that could change it: bit 0 set
	// when it was not closed with no failure counted; the bits above, a
	// version each update bumps (see noteGobreaker).
	seen atomic.Uint64

	// open is the error of the rejections of the last open stay, whose
	// Until is the first instant after it (nil before the first trip);
	// probes is the error of the rejections for the probe quota. For a
	// breaker made by FromGobreaker both are set once, with a zero Until.
	open   atomic.Pointer[OpenError]
	probes *OpenError
}

// adapted reports whether b was made by FromGobreaker.
func (b *Breaker) adapted() bool { return b.gb != nil && b.gb.adapted }

// gobreakerOutcome is the error passed to a gobreaker done function.
func gobreakerOutcome(b *Breaker, o outcome, err error) error {
	if b.adapted() {
		return err // the wrapped breaker's own settings classify
	}
	switch o {
	case success:
		return nil
	case failure:
		return errGobreakerFailure
	default:
		return errGobreakerNeutral
	}
}

func fromGobreakerState(s gobreaker.State) State {
	switch s {
	case gobreaker.StateOpen:
		return StateOpen
	case gobreaker.StateHalfOpen:
		return StateHalfOpen
	default:
		return StateClosed
	}
}

// FromGobreaker wraps an existing gobreaker two-step breaker so that it can
// sit in a chain. The wrapped breaker keeps its own settings: its
// IsSuccessful and IsExcluded see the call's error as is, and its
// OnStateChange is its own. Rejections are [*OpenError] values named
// after the wrapped breaker's Name, with a zero Until, matching [ErrOpen]
// (and [ErrTooManyProbes] for the probe quota). The returned Breaker's
// Settings are unknown to callguard, so a chain's lint treats it as
// opaque. A keyed set of chains (grpcmw.PerMethod, httpmw.PerHost) keeps
// the key of such a breaker while it was open, half-open or counting
// failures after the last call through it, as for any other breaker; calls
// made on cb directly, not through the returned Breaker, are seen only by
// the failures it counts while closed. A nil cb is an error.
func FromGobreaker(cb *gobreaker.TwoStepCircuitBreaker[any]) (*Breaker, error) {
	if cb == nil {
		return nil, errors.New("breaker: FromGobreaker(nil): needs a gobreaker breaker")
	}
	b := &Breaker{gb: &gbEngine{cb: cb, adapted: true, probes: &OpenError{Name: cb.Name(), Probes: true}}, s: Settings{Engine: EngineGobreaker}}
	b.gb.open.Store(&OpenError{Name: cb.Name()})
	return b, nil
}

// noteGobreaker records in b.gb.seen what the gobreaker of a breaker made by
// FromGobreaker is now, after a call through it that could change it
// (rejected: it is open or half-open, so not clean). It runs on the
// caller's goroutine with no lock of callguard's held, because reading the
// gobreaker's state may call its OnStateChange; clean reads only the
// record, and may run under a lock (a keyed set's). An update is made from
// a read that began after the previous update, so the last one wins with
// what the gobreaker was after every outcome recorded before it.
func (b *Breaker) noteGobreaker(rejected bool) {
	for {
		seen := b.gb.seen.Load()
		dirty := rejected || b.gb.cb.State() != gobreaker.StateClosed || b.gb.cb.Counts().TotalFailures > 0
		next := (seen | 1) + 2 // the next version
		if !dirty {
			next--
		}
		if b.gb.seen.CompareAndSwap(seen, next) {
			return
		}
		rejected = false // read again: another update came in between
	}
}
