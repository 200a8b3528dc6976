package telemetry

import (
	"context"
	"net"
	"strconv"

	"github.com/callguard/callguard/endpoint"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Endpoints registers the per-endpoint instruments of a load-balancing
// layer (grpcmw's EndpointHealth, httpmw's Endpoints), read from statuses
// when the SDK collects: callguard.endpoint.ejected (1 while ejected),
// callguard.endpoint.state (its breaker's: 0 closed, 1 half-open, 2
// open), callguard.endpoint.ejections, callguard.endpoint.readmissions and
// callguard.endpoint.capped (openings the ejection cap did not eject).
// Each carries callguard.client, callguard.service (the channel's target
// or the HTTP host) and the endpoint's server.address and server.port.
// It does nothing on a nil t or one without a MeterProvider.
func (t *T) Endpoints(mp metric.MeterProvider, statuses func() []endpoint.Status) error {
	if t == nil || mp == nil {
		return nil
	}
	m := mp.Meter(ScopeName)
	ejected, err := m.Int64ObservableGauge("callguard.endpoint.ejected",
		metric.WithDescription("1 while an endpoint is ejected from the picks (its breaker open or probing, within the ejection cap), else 0."))
	if err != nil {
		return err
	}
	state, err := m.Int64ObservableGauge("callguard.endpoint.state",
		metric.WithDescription("An endpoint's breaker state: 0 closed, 1 half-open, 2 open."))
	if err != nil {
		return err
	}
	counters := make([]metric.Int64ObservableCounter, 3)
	for i, c := range []struct{ name, desc string }{
		{"callguard.endpoint.ejections", "Times an endpoint was ejected."},
		{"callguard.endpoint.readmissions", "Times an ejected endpoint was readmitted (its probes succeeded)."},
		{"callguard.endpoint.capped", "Openings of an endpoint's breaker that the ejection cap did not eject (its breaker closed again)."},
	} {
		if counters[i], err = m.Int64ObservableCounter(c.name, metric.WithUnit("{ejection}"), metric.WithDescription(c.desc)); err != nil {
			return err
		}
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		// Channels to one target share its endpoints' series: their
		// values are summed (ejected: in how many channels), state is the
		// worst.
		type key struct{ service, endpoint string }
		type sum struct{ ejected, state, ejections, readmissions, capped int64 }
		sums := map[key]*sum{}
		var order []key
		for _, s := range statuses() {
			k := key{s.Service, s.Endpoint}
			v := sums[k]
			if v == nil {
				v = &sum{}
				sums[k] = v
				order = append(order, k)
			}
			if s.Ejected {
				v.ejected++
			}
			v.state = max(v.state, stateValue(s.State))
			v.ejections += int64(s.Ejections)
			v.readmissions += int64(s.Readmissions)
			v.capped += int64(s.Capped)
		}
		for _, k := range order {
			v := sums[k]
			attrs := []attribute.KeyValue{t.client, attribute.String("callguard.service", k.service)}
			host, port, err := net.SplitHostPort(k.endpoint)
			if err != nil {
				host = k.endpoint
			}
			attrs = append(attrs, attribute.String("server.address", host))
			if p, err := strconv.Atoi(port); err == nil {
				attrs = append(attrs, attribute.Int("server.port", p))
			}
			opt := metric.WithAttributes(attrs...)
			o.ObserveInt64(ejected, v.ejected, opt)
			o.ObserveInt64(state, v.state, opt)
			o.ObserveInt64(counters[0], v.ejections, opt)
			o.ObserveInt64(counters[1], v.readmissions, opt)
			o.ObserveInt64(counters[2], v.capped, opt)
		}
		return nil
	}, ejected, state, counters[0], counters[1], counters[2])
	return err
}
