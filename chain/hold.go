package chain

import "context"

type holdKey struct{}

// Holder lets a call keep its attempt's context alive after the call
// returns, for results that are used later, such as an HTTP response body
// read after RoundTrip. Normally the chain cancels the context it made for
// an attempt (the fused deadline of its timeouts) as soon as the call
// returns; under a context from [WithHolder], a call that calls
// [Holder.Hold] takes that cancellation over and must release it.
//
// A Holder serves one call of [Chain.Do] at a time: its attempts run one
// after another; it is not safe for concurrent use. Get one from
// [WithHolder]; a zero Holder has no context to hold, and its Hold returns a
// release that does nothing.
type Holder struct {
	cancel context.CancelFunc // of the current attempt's context, if the chain made one
	held   bool
}

// WithHolder returns a context for [Chain.Do] and the Holder that its
// attempts can use (one allocation for both). The chain finds the Holder
// only when it makes an attempt context (looking it up costs one
// ctx.Value).
func WithHolder(ctx context.Context) (context.Context, *Holder) {
	hc := &holderCtx{Context: ctx}
	return hc, &hc.h
}

type holderCtx struct {
	context.Context
	h Holder
}

func (c *holderCtx) Value(key any) any {
	if key == (holdKey{}) {
		return &c.h
	}
	return c.Context.Value(key)
}

// Hold keeps the attempt's context from being canceled when the call
// returns; the call calls it during the attempt. The returned release cancels it
// and must be called once the result is done with; it is safe to call more
// than once. Without an attempt context it returns a release that does
// nothing.
func (h *Holder) Hold() (release context.CancelFunc) {
	c := h.cancel
	if c == nil {
		return noRelease
	}
	h.held = true
	return c
}

func noRelease() {}

// begin records the cancellation of a new attempt's context.
func (h *Holder) begin(cancel context.CancelFunc) {
	h.cancel, h.held = cancel, false
}

// finish cancels the attempt's context unless the call held it.
func (h *Holder) finish() {
	if !h.held && h.cancel != nil {
		h.cancel()
	}
	h.cancel, h.held = nil, false
}

func holderFrom(ctx context.Context) *Holder {
	h, _ := ctx.Value(holdKey{}).(*Holder)
	return h
}
