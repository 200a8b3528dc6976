package fallback

import (
	"context"
	"errors"

	"github.com/callguard/callguard/breaker"
)

// Policy answers a failed call with a fallback. It is safe for concurrent
// use if its function is. Create one with [New]; the zero value covers
// nothing and passes every result through.
type Policy struct {
	fn   func(ctx context.Context, err error) error
	when func(ctx context.Context, err error) bool
	desc string
	err  error // from an option
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
		p.desc = "fallback(any failure)"
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
		p.desc = "fallback(custom)"
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
		fn:   fn,
		when: func(_ context.Context, err error) bool { return errors.Is(err, breaker.ErrOpen) },
		desc: "fallback(open)",
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
	return p, nil
}

// Covers reports whether err, returned to a caller whose context is ctx,
// goes to the fallback.
func (p *Policy) Covers(ctx context.Context, err error) bool {
	return err != nil && p.when != nil && p.fn != nil && p.when(ctx, err)
}

// OnlyOpen reports whether the fallback covers breaker.ErrOpen alone.
func (p *Policy) OnlyOpen() bool { return p.desc == "fallback(open)" }

// Do runs call and, if its error is covered, returns the fallback's result.
func (p *Policy) Do(ctx context.Context, call func(context.Context) error) error {
	err := call(ctx)
	if p.Covers(ctx, err) {
		return p.fn(ctx, err)
	}
	return err
}

// Fallback calls the fallback function for err directly (the zero Policy
// returns err).
func (p *Policy) Fallback(ctx context.Context, err error) error {
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
