package httpmw

import (
	"context"
	"time"

	"github.com/callguard/callguard/internal/adapter"
)

// Defaults of [NewEndpoints]' options.
const (
	// DefaultResolveEvery is how old a host's addresses get before a
	// request looks them up again (see [ResolveEvery]).
	DefaultResolveEvery = 30 * time.Second
	// DefaultMaxHosts is how many host names an Endpoints keeps
	// endpoints for (see [MaxHosts]).
	DefaultMaxHosts = 256
)

// EndpointsOption configures an [Endpoints].
type EndpointsOption interface{ applyEndpoints(*endpointsConfig) }

type endpointsOptionFunc func(*endpointsConfig)

func (f endpointsOptionFunc) applyEndpoints(c *endpointsConfig) { f(c) }

type endpointsConfig struct {
	adapter.Problems
	resolver lookuper
	every    time.Duration
	maxHosts int
}

// Resolver looks hosts up with r instead of net.DefaultResolver (a
// *net.Resolver of your own, a service registry, a test's map).
func Resolver(r interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}) EndpointsOption {
	return endpointsOptionFunc(func(c *endpointsConfig) {
		if r == nil {
			c.Fail("Resolver(nil): needs a resolver")
			return
		}
		c.resolver = r
	})
}

// ResolveEvery makes a request look its host up again when the host's
// addresses are older than d ([DefaultResolveEvery] without the option);
// a negative d never does. Zero is refused.
func ResolveEvery(d time.Duration) EndpointsOption {
	return endpointsOptionFunc(func(c *endpointsConfig) {
		if d == 0 {
			c.Fail("ResolveEvery(0): give a period, or a negative one for never")
			return
		}
		c.every = d
	})
}

// MaxHosts bounds the host names an Endpoints keeps endpoints for
// ([DefaultMaxHosts] without the option). Beyond it, the requests for a
// host not kept go to the base as they are, so that a client that can
// choose host names cannot grow it without bound; a host is never
// forgotten once kept.
func MaxHosts(n int) EndpointsOption {
	return endpointsOptionFunc(func(c *endpointsConfig) {
		if n <= 0 {
			c.Fail("MaxHosts(%d): needs at least one host", n)
			return
		}
		c.maxHosts = n
	})
}
