package endpoints

import (
	"errors"
	"net/http"

	"github.com/callguard/callguard/endpoint"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/httpmw"
	"github.com/callguard/callguard/preset"
	"google.golang.org/grpc"
)

// errNotBuilt: an arm's policy is not in this tree; the arm is left out
// of the cases (and the report says so). Every arm is built today.
var errNotBuilt = errors.New("endpoints: the per-endpoint policy is not built yet")

// endpointsGRPC are the dial options of a gRPC per-endpoint arm:
// grpcmw.Standard with grpcmw.Endpoints(h), h with the policy's default
// settings; its changes in a.changes, its Statuses in a.statuses, the
// per-method breaker's openings in a.opens.
func endpointsGRPC(a *arm, idempotent bool) ([]grpc.DialOption, error) {
	a.changes = newChangeLog()
	h, err := grpcmw.NewEndpointHealth(endpoint.Settings{OnChange: a.changes.add})
	if err != nil {
		return nil, err
	}
	a.statuses = h.Statuses
	opts := []grpcmw.Option{grpcmw.Endpoints(h), grpcmw.OnStateChange(a.opens.onOpen)}
	if idempotent {
		opts = append(opts, grpcmw.AllIdempotent())
	}
	ic, err := grpcmw.Standard(preset.Settings{}, opts...)
	if err != nil {
		return nil, err
	}
	return ic.DialOptions(), nil
}

// endpointsHTTP is the RoundTripper of an HTTP per-endpoint arm:
// httpmw.Standard over httpmw.NewEndpoints(base, …) with the policy's
// default settings and the test's resolver; its changes in a.changes, its
// Statuses in a.statuses, the per-host breaker's openings in a.opens.
func endpointsHTTP(a *arm, base *http.Transport) (http.RoundTripper, error) {
	a.changes = newChangeLog()
	eps, err := httpmw.NewEndpoints(base, endpoint.Settings{OnChange: a.changes.add}, httpmw.Resolver(hosts{}))
	if err != nil {
		return nil, err
	}
	a.statuses = eps.Statuses
	return httpmw.Standard(eps, preset.Settings{}, httpmw.OnStateChange(a.opens.onOpen))
}
