// Package telemetry is the adapters' OpenTelemetry metrics and log/slog
// events, through the OpenTelemetry metric API only: the application
// brings the SDK (a MeterProvider) and the exporter.
//
// A call costs one counter add, with an attribute set made once per key,
// target and outcome; everything else (breaker states and counters,
// timeouts' values, retries, budgets) is read from counters the policies
// keep anyway, when the SDK collects.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/internal/adapter"
	"github.com/callguard/callguard/internal/attempt"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of every instrument.
const ScopeName = "github.com/callguard/callguard"

// Outcome is how a call through an adapter ended, for the calls counter.
type Outcome string

const (
	OK       Outcome = "ok"       // the downstream answered well
	Failed   Outcome = "failed"   // the downstream failed, retries or not
	Rejected Outcome = "rejected" // a breaker refused, or ended the retries; or a throttle, a limit or a bulkhead refused
	TimedOut Outcome = "timeout"  // a timeout of the chain ended it
	// Queued: a timeout of the chain ended it while it waited for a
	// connection of the client's own (see attempt.Queued): the client's
	// wait, not the downstream's.
	Queued   Outcome = "client_queue"
	Canceled Outcome = "canceled" // the caller canceled, or its deadline passed
)

// Classify returns the outcome of a call that returned err to a caller
// whose context is ctx (err nil: ok).
func Classify(ctx context.Context, err error) Outcome {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, breaker.ErrOpen), errors.Is(err, callguard.ErrRejected):
		return Rejected
	case errors.As(err, new(*attempt.Queued)):
		return Queued
	case timeout.Expired(err):
		return TimedOut
	case ctx.Err() != nil:
		return Canceled
	}
	return Failed
}

// T is one adapter's telemetry. A nil *T does nothing, at no cost.
type T struct {
	pkg         string
	client      attribute.KeyValue // callguard.client: every instrument's, so that two adapters on one provider are told apart
	targetAttr  string             // "rpc.method" or "server.address"
	calls       metric.Int64ObservableCounter
	attempts    metric.Int64ObservableCounter
	transitions metric.Int64Counter
	evictions   metric.Int64Counter
	log         *slog.Logger
	reg         metric.Registration
	logged      sync.Map // lint findings already logged, by code and message: once each, not once per key

	mu   sync.RWMutex
	sets map[callKey]*callCount // made once per key, target and outcome
}

type callKey struct {
	key, target string
	port        int // the target's default port (HTTP: its scheme's), for a host without one
	outcome     Outcome
}

// callCount is the count of calls of one key, target and outcome: a call
// adds to it atomically, and the SDK reads it when it collects (an SDK's
// Add, with its attribute lookup, costs several times what a call through
// the chain does).
type callCount struct {
	n, attempts atomic.Int64
	attrs       metric.ObserveOption
}

// maxSets bounds the attribute sets of callguard.calls, hence its series
// and the memory behind them: past it, a call of a new key or target is
// counted with the key and the target "(other)".
const maxSets = 4096

// New returns the telemetry of an adapter (pkg "grpcmw" or "httpmw")
// named client (see ClientName), or nil when neither mp nor log is set.
// each walks the adapter's chains by key, for the instruments read at
// collection.
func New(pkg, client, targetAttr string, mp metric.MeterProvider, log *slog.Logger, each func(fn func(key string, c *chain.Chain))) (*T, error) {
	if mp == nil && log == nil {
		return nil, nil
	}
	t := &T{pkg: pkg, client: attribute.String("callguard.client", ClientName(pkg, client)), targetAttr: targetAttr, log: log}
	if log != nil {
		t.log = log.With("client", t.client.Value.AsString())
	}
	if mp == nil {
		return t, nil
	}
	m := mp.Meter(ScopeName)
	var err error
	if t.calls, err = m.Int64ObservableCounter("callguard.calls", metric.WithUnit("{call}"),
		metric.WithDescription("Calls through a callguard adapter, by outcome: ok, failed, rejected, timeout, canceled.")); err != nil {
		return nil, err
	}
	if t.attempts, err = m.Int64ObservableCounter("callguard.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts the calls through a callguard adapter made (retries included), by the call's outcome.")); err != nil {
		return nil, err
	}
	if t.transitions, err = m.Int64Counter("callguard.breaker.transitions", metric.WithUnit("{transition}"),
		metric.WithDescription("State changes of the breakers, by from and to state.")); err != nil {
		return nil, err
	}
	if t.evictions, err = m.Int64Counter("callguard.keys.evictions", metric.WithUnit("{key}"),
		metric.WithDescription("Keys a keyed set evicted to make room for a new one.")); err != nil {
		return nil, err
	}
	state, err := m.Int64ObservableGauge("callguard.breaker.state",
		metric.WithDescription("A breaker's state: 0 closed, 1 half-open, 2 open."))
	if err != nil {
		return nil, err
	}
	bcalls, err := m.Int64ObservableCounter("callguard.breaker.calls", metric.WithUnit("{call}"),
		metric.WithDescription("Calls a breaker admitted, by outcome: success, failure, neutral, slow."))
	if err != nil {
		return nil, err
	}
	rejections, err := m.Int64ObservableCounter("callguard.breaker.rejections", metric.WithUnit("{call}"),
		metric.WithDescription("Calls a breaker refused, by reason: open, probes (half-open quota used up)."))
	if err != nil {
		return nil, err
	}
	tvalue, err := m.Float64ObservableGauge("callguard.timeout.value", metric.WithUnit("s"),
		metric.WithDescription("A timeout's value now: the fixed one, or an adaptive one's current value."))
	if err != nil {
		return nil, err
	}
	retries, err := m.Int64ObservableCounter("callguard.retry.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Retries a retry policy made."))
	if err != nil {
		return nil, err
	}
	exhausted, err := m.Int64ObservableCounter("callguard.retry.exhausted", metric.WithUnit("{call}"),
		metric.WithDescription("Calls a retry policy gave up on, by reason."))
	if err != nil {
		return nil, err
	}
	tokens, err := m.Float64ObservableGauge("callguard.retry.budget.tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Retries a retry budget allows now."))
	if err != nil {
		return nil, err
	}
	t.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		seen := map[chain.Policy]bool{} // a policy shared by keys' chains is reported once, under the first key
		each(func(key string, c *chain.Chain) {
			observe(o, t.client, key, c, seen, state, bcalls, rejections, tvalue, retries, exhausted, tokens)
		})
		t.mu.RLock()
		for _, c := range t.sets {
			o.ObserveInt64(t.calls, c.n.Load(), c.attrs)
			o.ObserveInt64(t.attempts, c.attempts.Load(), c.attrs)
		}
		t.mu.RUnlock()
		return nil
	}, t.calls, t.attempts, state, bcalls, rejections, tvalue, retries, exhausted, tokens)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// clients numbers the adapters built without a name, by package.
var clients sync.Map // pkg → *atomic.Int64

// ClientName returns name if it is not empty, and otherwise a name of the
// adapter's own: pkg for the first adapter of the package built in the
// process with telemetry and no name, then pkg-2, pkg-3, … in the order
// they are built (name them, with grpcmw.Client or httpmw.Client, for
// series that stay the same across restarts).
func ClientName(pkg, name string) string {
	if name != "" {
		return name
	}
	n, _ := clients.LoadOrStore(pkg, new(atomic.Int64))
	if k := n.(*atomic.Int64).Add(1); k > 1 {
		return fmt.Sprintf("%s-%d", pkg, k)
	}
	return pkg
}

// stateValue is a breaker state's value in the state gauges: 0 closed,
// 1 half-open, 2 open.
func stateValue(s breaker.State) int64 {
	switch s {
	case breaker.StateHalfOpen:
		return 1
	case breaker.StateOpen:
		return 2
	}
	return 0
}

// observe reports the policies of chain c, key key, that are not in seen.
func observe(o metric.Observer, client attribute.KeyValue, key string, c *chain.Chain, seen map[chain.Policy]bool, state, bcalls, rejections metric.Int64Observable,
	tvalue metric.Float64Observable, retries, exhausted metric.Int64Observable, tokens metric.Float64Observable) {
	base := nonEmpty([]attribute.KeyValue{client}, "callguard.key", key)
	with := func(attrs ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributes(append(base[:len(base):len(base)], attrs...)...)
	}
	for i, p := range adapter.Flatten(c) {
		if seen[p] {
			continue
		}
		seen[p] = true
		policy := attribute.Int("callguard.policy.index", i)
		switch v := p.(type) {
		case *breaker.Breaker:
			named := nonEmpty([]attribute.KeyValue{policy}, "callguard.breaker.name", v.Settings().Name)
			b := func(attr attribute.KeyValue) metric.MeasurementOption { return with(append(named, attr)...) }
			o.ObserveInt64(state, stateValue(v.State()), b(attribute.String("callguard.breaker.override", v.Override().String())))
			cn := v.Counts()
			for outcome, n := range map[string]uint64{"success": cn.Successes, "failure": cn.Failures, "neutral": cn.Neutral, "slow": cn.SlowUnanswered} {
				o.ObserveInt64(bcalls, int64(n), b(attribute.String("callguard.outcome", outcome)))
			}
			o.ObserveInt64(rejections, int64(cn.RejectedOpen), b(attribute.String("callguard.reason", "open")))
			o.ObserveInt64(rejections, int64(cn.RejectedProbes), b(attribute.String("callguard.reason", "probes")))
		case *timeout.Policy:
			o.ObserveFloat64(tvalue, v.Timeout().Seconds(), with(policy, attribute.Bool("callguard.timeout.adaptive", bridge.TimeoutOf(v).Adaptive)))
		case *retry.Policy:
			x := bridge.RetryOf(v)
			n, gaveUp := x.Retries()
			o.ObserveInt64(retries, int64(n), with(policy))
			for reason, m := range gaveUp {
				o.ObserveInt64(exhausted, int64(m), with(policy, attribute.String("callguard.reason", reason)))
			}
			if level, ok := x.BudgetTokens(); ok {
				o.ObserveFloat64(tokens, level, with(policy))
			}
		}
	}
}

// Call counts a call of key to target (a method, or a URL's host: its
// host and its port, or defaultPort without one, are server.address and
// server.port) that ended with outcome after attempts attempts.
func (t *T) Call(key, target string, defaultPort int, outcome Outcome, attempts int) {
	if t == nil || t.calls == nil {
		return
	}
	k := callKey{key, target, defaultPort, outcome}
	t.mu.RLock()
	opt, ok := t.sets[k]
	full := len(t.sets) >= maxSets
	t.mu.RUnlock()
	if !ok && full {
		// Past the bound (hosts chosen by whoever sends requests, keys a
		// keyed set has long evicted): no new series; the key and the
		// target are folded into "(other)".
		k.key, k.target, k.port = "(other)", "(other)", 0
		t.mu.RLock()
		opt, ok = t.sets[k]
		t.mu.RUnlock()
	}
	if !ok {
		t.mu.Lock()
		if opt, ok = t.sets[k]; !ok {
			attrs := targetAttrs(nonEmpty([]attribute.KeyValue{t.client}, "callguard.key", k.key), t.targetAttr, k.target, k.port)
			attrs = append(attrs, attribute.String("callguard.outcome", string(outcome)))
			opt = &callCount{attrs: metric.WithAttributeSet(attribute.NewSet(attrs...))}
			if t.sets == nil {
				t.sets = map[callKey]*callCount{}
			}
			t.sets[k] = opt
		}
		t.mu.Unlock()
	}
	opt.n.Add(1)
	opt.attempts.Add(int64(attempts))
}

// Watcher returns the receiver of the state changes of key's breakers:
// counted, and logged at Warn (open) or Info, with fn (the adapter's
// OnStateChange, may be nil) called after.
func (t *T) Watcher(key string, fn func(breaker.StateChange)) func(breaker.StateChange) {
	if t == nil {
		return fn
	}
	return func(sc breaker.StateChange) {
		if t.transitions != nil {
			attrs := nonEmpty(nonEmpty([]attribute.KeyValue{t.client}, "callguard.key", key), "callguard.breaker.name", sc.Name)
			t.transitions.Add(context.Background(), 1, metric.WithAttributes(append(attrs,
				attribute.String("callguard.from", sc.From.String()), attribute.String("callguard.to", sc.To.String()))...))
		}
		if t.log != nil {
			level := slog.LevelInfo
			if sc.To == breaker.StateOpen {
				level = slog.LevelWarn
			}
			t.log.Log(context.Background(), level, "callguard: breaker "+sc.To.String(),
				logArgs("adapter", t.pkg, "key", key, "breaker", sc.Name, "from", sc.From.String(), "to", sc.To.String())...)
		}
		if fn != nil {
			fn(sc)
		}
	}
}

// Built logs the findings of the lint of a chain built for key: at Warn
// for a warning, at Info for an info; each finding once, with the first
// key it was found for (per-key chains are usually alike).
func (t *T) Built(key string, c *chain.Chain) {
	if t == nil || t.log == nil {
		return
	}
	for _, f := range c.Findings() {
		if _, again := t.logged.LoadOrStore(f.Code+" "+f.Message, true); again {
			continue // the same chain shape built for another key
		}
		level := slog.LevelInfo
		if f.Severity == chain.SeverityWarning {
			level = slog.LevelWarn
		}
		t.log.Log(context.Background(), level, "callguard: lint "+f.Code, logArgs("adapter", t.pkg, "key", key, "chain", c.String(), "finding", f.Message)...)
	}
}

// Evicted counts and logs the eviction of key, and calls fn (the
// adapter's OnEvict, may be nil).
func (t *T) Evicted(fn func(key string)) func(key string) {
	if t == nil {
		return fn
	}
	return func(key string) {
		if t.evictions != nil {
			t.evictions.Add(context.Background(), 1, metric.WithAttributes(t.client))
		}
		if t.log != nil {
			t.log.Info("callguard: key evicted", logArgs("adapter", t.pkg, "key", key)...)
		}
		if fn != nil {
			fn(key)
		}
	}
}

// nonEmpty appends the attribute key=value to attrs, unless value is
// empty: an attribute callguard has no value for (the key outside a keyed
// set, the name of an unnamed breaker) is left out, not set to "".
func nonEmpty(attrs []attribute.KeyValue, key, value string) []attribute.KeyValue {
	if value == "" {
		return attrs
	}
	return append(attrs, attribute.String(key, value))
}

// logArgs returns the key-value pairs kv of a log line without those whose
// value is empty, as the attributes of the metrics.
func logArgs(kv ...string) []any {
	out := make([]any, 0, len(kv))
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			out = append(out, kv[i], kv[i+1])
		}
	}
	return out
}
