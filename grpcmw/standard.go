package grpcmw

import (
	"fmt"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/preset"
)

// Standard returns interceptors that run each call through callguard's
// recommended chain (preset.Chain: retry → limit → breaker → adaptive
// attempt timeout, the downstream's overload refusals left to the limit),
// one chain per method, so that each method has its own breaker, limit
// and timeout; at most preset.DefaultMaxKeys methods are kept (see
// [KeyStats]). s tunes the chain (its zero value is the recommended one;
// Hedge: true is the hedging variant); opts are the interceptors' own
// options ([Idempotent], [Metrics], [Logger], [Client], …), applied after,
// so that a [PerTarget] or [PerKey] among them replaces the per-method
// set. It is what README.md's long form builds, by hand, per method.
//
// Only the methods declared [Idempotent] (or [AllIdempotent]) are retried
// or hedged, as with [NewInterceptors].
func Standard(s preset.Settings, opts ...Option) (*Interceptors, error) {
	if _, err := preset.Chain(s, Overloaded); err != nil {
		return nil, fmt.Errorf("grpcmw: Standard: %w", err)
	}
	build := func(string) (*chain.Chain, error) { return preset.Chain(s, Overloaded) }
	return NewInterceptors(nil, append([]Option{PerMethod(build, preset.DefaultMaxKeys)}, opts...)...)
}
