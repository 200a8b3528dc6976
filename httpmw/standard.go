package httpmw

import (
	"fmt"
	"net/http"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/preset"
)

// Standard returns a Transport that sends each request through
// callguard's recommended chain (preset.Chain: retry → limit → breaker →
// adaptive attempt timeout, the downstream's overload refusals left to
// the limit), one chain per request host, so that each host has its own
// breaker, limit and timeout; at most preset.DefaultMaxKeys hosts are
// kept (see [KeyStats]). s tunes the chain (its zero value is the
// recommended one; Hedge: true is the hedging variant); opts are the
// transport's own options ([Metrics], [Logger], [Client], …), applied
// after, so that a [PerHost] or [PerKey] among them replaces the per-host
// set. It is what README.md's long form builds, by hand, per host.
//
// Only idempotent requests are retried or hedged, as with [New].
func Standard(base http.RoundTripper, s preset.Settings, opts ...Option) (*Transport, error) {
	if _, err := preset.Chain(s, Overloaded); err != nil {
		return nil, fmt.Errorf("httpmw: Standard: %w", err)
	}
	build := func(string) (*chain.Chain, error) { return preset.Chain(s, Overloaded) }
	return New(base, nil, append([]Option{PerHost(build, preset.DefaultMaxKeys)}, opts...)...)
}
