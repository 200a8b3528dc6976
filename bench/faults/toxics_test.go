package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// lab is toxiproxy as a library, in process: its proxies, one in front of
// each arm's server, are made and driven through the same types its HTTP
// API drives (no API listener).
type lab struct {
	api *toxiproxy.ApiServer
	n   atomic.Int64
}

func newLab() *lab {
	return &lab{api: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
}

// proxy starts a proxy on 127.0.0.1:0 in front of upstream.
func (l *lab) proxy(upstream string) (*toxiproxy.Proxy, error) {
	p := toxiproxy.NewProxy(l.api, fmt.Sprintf("arm-%d", l.n.Add(1)), "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("faults: toxiproxy in front of %s: %w", upstream, err)
	}
	return p, nil
}

// atOnce runs f on every proxy at the same instant (goroutines released
// together) and returns how long the slowest took: the spread of the
// fault's start across the arms.
func atOnce(ps []*toxiproxy.Proxy, f func(*toxiproxy.Proxy) error) (time.Duration, error) {
	release := make(chan struct{})
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() {
			<-release
			errs[i] = f(p)
		})
	}
	start := time.Now()
	close(release)
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// The toxics' names: the one a fault adds, and the healthy latency every
// proxy carries throughout.
const (
	toxicName = "fault"
	baseToxic = "base"
)

// baseLatency is the healthy downstream's latency: every proxy delays its
// answers by it throughout, under the faults' toxics. A loopback call
// takes well under a millisecond; without it, the arms' closed loops
// saturate the two cores and their counts measure each client's CPU cost
// per call rather than the fault (measured: plain and grpc-retry, the
// same client but for a service config, 2,849 and 3,480 successes in one
// healthy second of the same run).
const baseLatency = 10 * time.Millisecond

// addToxic returns what adds toxic typ (stream "upstream" or
// "downstream") with attrs to a proxy, named name (toxicName if none).
func addToxic(typ, stream string, attrs map[string]any, name ...string) func(*toxiproxy.Proxy) error {
	n := toxicName
	if len(name) > 0 {
		n = name[0]
	}
	body, err := json.Marshal(map[string]any{"name": n, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs})
	return func(p *toxiproxy.Proxy) error {
		if err != nil {
			return err
		}
		if _, err := p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
			return fmt.Errorf("faults: toxic %s on %s: %w", typ, p.Name, err)
		}
		return nil
	}
}

func removeToxic(p *toxiproxy.Proxy) error {
	return p.Toxics.RemoveToxic(context.Background(), toxicName)
}

func stopProxy(p *toxiproxy.Proxy) error { p.Stop(); return nil }

func startProxy(p *toxiproxy.Proxy) error { return p.Start() }
