package preset_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/preset"
)

var errOverloaded = errors.New("overloaded")

func overloaded(err error) bool { return errors.Is(err, errOverloaded) }

// TestRecommended: the zero Settings give the recommended chain, retry →
// limit → breaker → adaptive attempt timeout, and it draws no finding;
// the hedging variant adds a hedge and a retry budget and passes the
// strict lint.
func TestRecommended(t *testing.T) {
	c, err := preset.Chain(preset.Settings{}, overloaded)
	if err != nil {
		t.Fatal(err)
	}
	if fs := c.Findings(); len(fs) != 0 {
		t.Errorf("findings %v, want none", fs)
	}
	s := c.String()
	for _, want := range []string{"retry(3, FitDeadline)", "limit(Gradient2", "10 consecutive over 500ms, open 800ms, 2 of 3 probes", "timeout(adaptive"} {
		if !strings.Contains(s, want) {
			t.Errorf("chain %s: no %q", s, want)
		}
	}
	if i, j := strings.Index(s, "retry("), strings.Index(s, "breaker("); i < 0 || j < i {
		t.Errorf("chain %s: want the retry outside the breaker", s)
	}
	h, err := preset.Chain(preset.Settings{Hedge: true}, overloaded)
	if err != nil {
		t.Fatal(err)
	}
	if s := h.String(); !strings.Contains(s, "hedge(") {
		t.Errorf("the hedging variant %s: no hedge", s)
	}
	for _, f := range h.Findings() {
		if f.Severity != chain.SeverityInfo {
			t.Errorf("the hedging variant: %v, want infos at most", f)
		}
	}
}

// TestSettingsReachThePolicies: a tuned setting changes the chain, and the
// others keep their recommended values.
func TestSettingsReachThePolicies(t *testing.T) {
	c, err := preset.Chain(preset.Settings{Attempts: 5, OpenTimeout: 2 * time.Second, HalfOpenSuccesses: 3, NoLimit: true, Name: "catalog"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := c.String()
	for _, want := range []string{"retry(5, FitDeadline)", "10 consecutive over 500ms", "open 2s", "catalog"} {
		if !strings.Contains(s, want) {
			t.Errorf("chain %s: no %q", s, want)
		}
	}
	if strings.Contains(s, "limit(") {
		t.Errorf("chain %s: NoLimit kept the limit", s)
	}
}

// TestInvalidSettingsNamed: a bad setting is an error at construction
// that names it.
func TestInvalidSettingsNamed(t *testing.T) {
	for _, tc := range []struct {
		s    preset.Settings
		name string
	}{
		{preset.Settings{Attempts: -1}, "Attempts"},
		{preset.Settings{Backoff: -time.Second}, "Backoff"},
		{preset.Settings{AttemptTimeout: -time.Second}, "AttemptTimeout"},
		{preset.Settings{MinAttemptTimeout: -time.Second}, "MinAttemptTimeout"},
		{preset.Settings{MinAttemptTimeout: 2 * time.Second}, "MinAttemptTimeout"}, // above MaxAttemptTimeout
		{preset.Settings{OpenTimeout: -time.Second}, "OpenTimeout"},
		{preset.Settings{HalfOpenSuccesses: 5}, "HalfOpenSuccesses"},
		{preset.Settings{Hedge: true, RetryBudget: -1}, "RetryBudget"},
		{preset.Settings{Hedge: true, HedgeDelay: -time.Second}, "HedgeDelay"},
	} {
		if _, err := preset.Chain(tc.s, nil); err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%+v: %v, want an error naming %s", tc.s, err, tc.name)
		}
	}
}

// TestMinAttemptTimeout: after a downstream's answers took 1 ms, the
// adaptive attempt timeout is at its floor (AttemptTimeout / 10 = 30 ms)
// and a 100 ms stall is cut; with MinAttemptTimeout 200 ms the stall is
// waited out.
func TestMinAttemptTimeout(t *testing.T) {
	for _, tc := range []struct {
		min     time.Duration
		stalled bool // whether the stalled call fails
	}{{0, true}, {200 * time.Millisecond, false}} {
		synctest.Test(t, func(t *testing.T) {
			c, err := preset.Chain(preset.Settings{MinAttemptTimeout: tc.min, Attempts: 1, NoLimit: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			for range 200 {
				if err := c.Do(ctx, func(ctx context.Context) error { return sleep(ctx, time.Millisecond) }); err != nil {
					t.Fatal(err)
				}
			}
			err = c.Do(ctx, func(ctx context.Context) error { return sleep(ctx, 100*time.Millisecond) })
			if got := err != nil; got != tc.stalled {
				t.Errorf("MinAttemptTimeout %v: the 100 ms stall's error %v, want failed %v", tc.min, err, tc.stalled)
			}
		})
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestRand: two chains given sources of one seed wait the same jittered
// waits.
func TestRand(t *testing.T) {
	took := func(seed uint64) time.Duration {
		var d time.Duration
		synctest.Test(t, func(t *testing.T) {
			c, err := preset.Chain(preset.Settings{Attempts: 5, NoLimit: true, Rand: rand.NewPCG(seed, 0)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_ = c.Do(context.Background(), func(context.Context) error { return errors.New("down") })
			d = time.Since(start)
		})
		return d
	}
	if a, b, other := took(3), took(3), took(4); a != b || a == other {
		t.Errorf("seed 3: %v and %v, seed 4: %v; want the same for one seed, other waits for another", a, b, other)
	}
}
