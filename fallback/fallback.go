package fallback

import (
	"context"
	"errors"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/bridge"
)

// Policy answers a failed call with a fallback. It is safe for concurrent
// use if its function is. Create one with [New]; the zero value covers
// nothing and passes every result through.
type Policy struct {
	fn       func(ctx context.Context, err error) error
	when     func(ctx context.Context, err error) bool
	desc     string
	onlyOpen bool  // when is the default: breaker.ErrOpen alone
	err      error // from an option
	x        bridge.Fallback
}

// Option configures a [Policy].
type Option interface{ apply(*Policy) }

type optionFunc func(*Policy)

func (f optionFunc) apply(p *Policy) { f(p) }

// OnAnyFailure makes the fallback cover every error except the caller's own
// cancellation, not only breaker.ErrOpen.
func OnAnyFailure() Option {
	return optionFunc(func(p *Policy) {
		p.when = func(ctx context.Context, err error) bool { return ctx.Err() == nil }
		p.desc, p.onlyOpen = "fallback(any failure)", false
	})
}

// When makes the fallback cover the errors covers reports true for, except
// when the caller's own context has ended.
func When(covers func(error) bool) Option {
	return optionFunc(func(p *Policy) {
		if covers == nil {
			p.err = errors.New("fallback: When(nil): needs a function")
			return
		}
		// As OnAnyFailure: never the caller's own cancellation or deadline.
		p.when = func(ctx context.Context, err error) bool { return ctx.Err() == nil && covers(err) }
		p.desc, p.onlyOpen = "fallback(custom)", false
	})
}

// New returns a fallback that calls fn with the failed call's error when the
// error is covered; fn's result is the call's result (nil: degraded
// success). fn typically fills the caller's result from a cache or a
// default, or calls an alternative.
func New(fn func(ctx context.Context, err error) error, opts ...Option) (*Policy, error) {
	if fn == nil {
		return nil, errors.New("fallback: New(nil): needs a fallback function")
	}
	p := &Policy{
		fn:       fn,
		when:     func(_ context.Context, err error) bool { return errors.Is(err, breaker.ErrOpen) },
		desc:     "fallback(open)",
		onlyOpen: true,
	}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("fallback: nil Option")
		}
		o.apply(p)
	}
	if p.err != nil {
		return nil, p.err
	}
	p.x = bridge.Fallback{Covers: p.covers, Answer: p.answer, OnlyOpen: p.onlyOpen}
	return p, nil
}

func init() {
	bridge.FallbackOf = func(p any) *bridge.Fallback {
		q := p.(*Policy)
		if q.x.Covers == nil { // the zero Policy
			return &bridge.Fallback{Covers: q.covers, Answer: q.answer}
		}
		return &q.x
	}
}

// covers reports whether err, returned to a caller whose context is ctx,
// goes to the fallback.
func (p *Policy) covers(ctx context.Context, err error) bool {
	return err != nil && p.when != nil && p.fn != nil && p.when(ctx, err)
}

// Do runs call and, if its error is covered, returns the fallback's result.
func (p *Policy) Do(ctx context.Context, call func(context.Context) error) error {
	err := call(ctx)
	if p.covers(ctx, err) {
		return p.fn(ctx, err)
	}
	return err
}

// answer calls the fallback function for err directly (the zero Policy
// returns err).
func (p *Policy) answer(ctx context.Context, err error) error {
	if p.fn == nil {
		return err
	}
	return p.fn(ctx, err)
}

// String returns "fallback(open)", "fallback(any failure)" or
// "fallback(custom)".
func (p *Policy) String() string {
	if p.desc == "" {
		return "fallback(none)"
	}
	return p.desc
}
