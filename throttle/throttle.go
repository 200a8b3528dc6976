package throttle

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/internal/deadline"
	"github.com/callguard/callguard/internal/seeded"
)

// Throttle is a client-side adaptive throttle. It is safe for concurrent
// use, and takes no lock and allocates nothing to admit a call and record
// its outcome. Create one with [New]; the zero value is not usable: its
// Allow and Do return an error (which does not match [ErrThrottled]).
//
// Most callers should use [Throttle.Do]; [Throttle.Allow] and [Permit] are
// for interceptors and streams.
type Throttle struct {
	s Settings // normalized
	w window

	// random, when set (Settings.Rand), replaces rand.Float64.
	random func() float64
}

// New returns a Throttle for s, or a [*SettingsError] naming the first
// invalid field.
func New(s Settings) (*Throttle, error) {
	s, err := s.normalize()
	if err != nil {
		return nil, err
	}
	t := &Throttle{s: s}
	if s.Rand != nil {
		t.random = seeded.New(s.Rand).Float64
	}
	t.w.init(time.Now(), s.Window)
	return t, nil
}

// Settings returns the throttle's settings with every default filled in.
func (t *Throttle) Settings() Settings { return t.s }

// String describes the throttle, e.g.
// "throttle(K 2, window 1m0s, max 90%, min 20 requests)".
func (t *Throttle) String() string {
	if t.w.width == 0 {
		return "throttle(zero value: make one with throttle.New)"
	}
	return fmt.Sprintf("throttle(K %s, window %v, max %s%%, min %d requests)",
		strconv.FormatFloat(t.s.K, 'g', -1, 64), t.s.Window,
		strconv.FormatFloat(t.s.MaxRejectionRate*100, 'g', -1, 64), t.s.MinRequests)
}

var errZero = errors.New("throttle: a zero Throttle admits no call; make one with throttle.New")

// Permit is the admission of one call by [Throttle.Allow]. Report how the
// call ended with [Permit.Done] or [Permit.DoneNeutral], exactly once, from
// any goroutine. The zero Permit's Done and DoneNeutral do nothing.
type Permit struct {
	t   *Throttle
	ctx context.Context
	e   uint32 // the epoch of the bucket the request was counted in
}

// Allow decides whether to admit one call: the two-step form of
// [Throttle.Do] for interceptors and streams. It counts the call as a
// request whether or not it admits it, and rejects it with probability
// [Throttle.RejectionRate]. On admission, run the call and pass its error
// to [Permit.Done]; ctx is the caller's context (it may be nil), used to
// tell the caller's own cancellation from a refusal. On rejection the
// error is a [*RejectedError], matching [ErrThrottled] and
// callguard.ErrRejected.
func (t *Throttle) Allow(ctx context.Context) (Permit, error) {
	if t.w.width == 0 {
		return Permit{}, errZero
	}
	e := t.w.epoch(time.Now())
	requests, accepts := t.w.sums(e)
	add(&t.w.requests[e%buckets], e)
	if p := rate(requests, accepts, &t.s); p > 0 {
		var r float64
		if t.random != nil {
			r = t.random()
		} else {
			r = rand.Float64()
		}
		if r < p {
			return Permit{}, &RejectedError{Probability: p, Requests: requests, Accepts: accepts, Window: t.s.Window}
		}
	}
	return Permit{t: t, ctx: ctx, e: e}, nil
}

// Done reports how the admitted call ended; err is its error. A nil error
// counts as accepted; an error returned after the caller's context ended,
// or matching callguard.ErrRejected or breaker.ErrOpen (a policy inside
// refused the call), is neutral (as [Permit.DoneNeutral]);
// an error marked breaker.NotFailure (the gRPC and HTTP adapters mark the
// answers that are the caller's fault so, e.g. InvalidArgument or a 404)
// counts as accepted; Settings.IsAccepted decides any other error, and without it any other
// error is a refusal: the request stays counted with no accept.
func (p Permit) Done(err error) {
	if p.t == nil {
		return
	}
	switch p.t.classify(p.ctx, err) {
	case accepted:
		add(&p.t.w.accepts[p.e%buckets], p.e)
	case neutral:
		sub(&p.t.w.requests[p.e%buckets], p.e)
	}
}

// DoneNeutral reports that the admitted call says nothing of the
// downstream: its caller gave up on it, or something other than the
// downstream ended it. The throttle takes its request back, as if the
// call had never been asked for, so that callers' own cancellations push
// the rejection probability neither up (as a refusal would) nor down (as
// an accept would). A request whose bucket has left the window is already
// gone. Call it instead of Done.
func (p Permit) DoneNeutral() {
	if p.t == nil {
		return
	}
	sub(&p.t.w.requests[p.e%buckets], p.e)
}

type outcome uint8

const (
	refused outcome = iota
	accepted
	neutral
)

func (t *Throttle) classify(ctx context.Context, err error) outcome {
	switch {
	case err == nil:
		return accepted
	case deadline.Ended(ctx) && !(bridge.BreakerFailure != nil && bridge.BreakerFailure(err)),
		errors.Is(err, callguard.ErrRejected), errors.Is(err, breaker.ErrOpen):
		// Not an answer of the downstream: the caller left, or a policy
		// inside refused the call (a breaker that is open included: its
		// rejections counted as refusals would keep the throttle shedding
		// for a window after the breaker closed).
		return neutral
	case bridge.BreakerNotFailure != nil && bridge.BreakerNotFailure(err):
		return accepted // an answer marked breaker.NotFailure: the adapters' caller errors
	case t.s.IsAccepted != nil && t.s.IsAccepted(err):
		return accepted
	}
	return refused
}

// Do runs call if the throttle admits it and records how it ended (see
// [Permit.Done]). A rejected call is not run and Do returns a
// [*RejectedError], matching [ErrThrottled] and callguard.ErrRejected;
// otherwise Do returns call's error unchanged. A call that panics counts
// as a refusal and the panic goes on. As with breaker.Do, ctx is passed to
// call as given (nil included), and a nil call panics once admitted.
func (t *Throttle) Do(ctx context.Context, call func(context.Context) error) error {
	p, err := t.Allow(ctx)
	if err != nil {
		return err
	}
	// A panic leaves the request counted with no accept: a refusal.
	err = call(ctx)
	p.Done(err)
	return err
}

// RejectionRate returns the probability with which a call would be
// rejected now: max(0, (requests − K·accepts) / (requests + 1)) over the
// window, capped at MaxRejectionRate, and 0 while the window holds fewer
// than MinRequests requests.
func (t *Throttle) RejectionRate() float64 {
	if t.w.width == 0 {
		return 0
	}
	requests, accepts := t.w.sums(t.w.epoch(time.Now()))
	return rate(requests, accepts, &t.s)
}

// Counts returns the requests (admitted and rejected, less those taken
// back as neutral) and the accepts in the window now.
func (t *Throttle) Counts() (requests, accepts int) {
	if t.w.width == 0 {
		return 0, 0
	}
	return t.w.sums(t.w.epoch(time.Now()))
}
