package chain_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

// fuzzPolicies decodes data into a list of policies: each takes a kind
// byte and eight bytes of settings, so that the fuzzer can reach every
// order, nesting and extreme setting the lint computes with.
func fuzzPolicies(data []byte, depth int) []chain.Policy {
	var ps []chain.Policy
	for len(data) >= 9 && len(ps) < 8 {
		kind, v := data[0], binary.LittleEndian.Uint64(data[1:9])
		data = data[9:]
		d := time.Duration(v >> 1)
		small := int(v % 20)
		var p chain.Policy
		var err error
		switch kind % 9 {
		case 0:
			p, err = breaker.New(breaker.Settings{ConsecutiveFailures: small, OpenTimeout: d % (time.Hour * 24 * 365 * 100), HalfOpenProbes: int(v>>8%8) + 1, HalfOpenSuccesses: 1})
		case 1:
			p, err = breaker.New(breaker.Settings{FailureRate: float64(v%101) / 100, Window: d, MinCalls: small, MaxOpenTimeout: d * 2, SkipHalfOpen: v&1 == 1})
		case 2:
			p, err = retry.New(retry.MaxAttempts(int(v%12)), retry.Exponential(d%time.Hour, d))
		case 3:
			b, _ := retry.NewBudget(float64(v%11)/10, float64(v%7))
			p, err = retry.New(retry.MaxAttempts(small), retry.Constant(d%time.Second), retry.WithBudget(b), retry.RetryWhenOpen())
		case 4:
			p, err = timeout.New(d, timeout.Latency(float64(v%100+1)/100, d/time.Duration(small+1)))
		case 5:
			p, err = timeout.New(d, timeout.Adaptive(timeout.AdaptiveOptions{Quantile: 0.99, Max: d * time.Duration(small)}))
		case 6:
			opts := []fallback.Option{}
			if v&1 == 1 {
				opts = append(opts, fallback.OnAnyFailure())
			}
			p, err = fallback.New(func(context.Context, error) error { return nil }, opts...)
		case 7:
			if depth < 2 {
				var c *chain.Chain
				c, err = chain.New(fuzzPolicies(data, depth+1)...)
				p = c
			}
		case 8:
			p = nil // refused by name
		}
		if err != nil {
			continue
		}
		ps = append(ps, p)
	}
	return ps
}

// FuzzNew: chain.New never panics on any list of policies: it refuses a
// nil or zero one by position, or builds a chain whose findings, string
// and calls (a success, a failure, a hang under a deadline) all answer
// without panicking, and a call ends by the caller's deadline.
func FuzzNew(f *testing.F) {
	seed := func(kinds ...byte) []byte {
		var out []byte
		for i, k := range kinds {
			var v [8]byte
			binary.LittleEndian.PutUint64(v[:], uint64(i+1)*uint64(300*time.Millisecond))
			out = append(append(out, k), v[:]...)
		}
		return out
	}
	f.Add(seed(4, 2, 0, 4))
	f.Add(seed(0, 2, 4))
	f.Add(seed(6, 3, 1, 5))
	f.Add(seed(7, 2, 0, 4, 8))
	f.Add(seed(4, 4, 2, 2, 0, 1))
	f.Add([]byte{1, 255, 255, 255, 255, 255, 255, 255, 127})
	errDown := errors.New("down")
	f.Fuzz(func(t *testing.T, data []byte) {
		ps := fuzzPolicies(data, 0)
		c, err := chain.Options{DownstreamRecovery: time.Duration(len(data)) * time.Second}.New(ps...)
		if err != nil {
			if c != nil || !strings.HasPrefix(err.Error(), "chain: ") {
				t.Fatalf("New: %v, %v", c, err)
			}
			return
		}
		for _, fd := range c.Findings() {
			if fd.Code == "" || fd.Message == "" || strings.Contains(fd.Message, "%!") {
				t.Fatalf("%v: a finding %+v", c, fd)
			}
		}
		_ = c.String()
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			_ = c.Do(ctx, func(context.Context) error { return nil })
			_ = c.Do(ctx, func(context.Context) error { return errDown })
			_ = c.Do(ctx, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("%v: the calls took %v, past the caller's 10s deadline", c, took)
			}
		})
	})
}
