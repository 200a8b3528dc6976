// Package guards holds what the analyzer must not guess: settings it
// cannot know, slices of policies, chains built in loops, a user's own
// policy type; and the suppression comment.
package guards

import (
	"context"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

func newRetry() *retry.Policy {
	r, _ := retry.New(retry.MaxAttempts(4))
	return r
}

// Built in another function: the order is known, its numbers are not.
func BuiltElsewhere() (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	t, _ := timeout.New(time.Second, timeout.Latency(0.99, 100*time.Millisecond))
	return chain.New(
		b,
		newRetry(), // want `CG002 \(unknown to the analyzer: newRetry\(…\)\): retry inside a breaker`
		t,
	)
}

// A setting from a variable: unknown, said so.
func FromAVariable(attempts int) (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	r, _ := retry.New(retry.MaxAttempts(attempts))
	t, _ := timeout.New(time.Second, timeout.Latency(0.99, 100*time.Millisecond))
	return chain.New(
		b,
		r, // want `CG002 \(unknown to the analyzer: attempts\)`
		t,
	)
}

// The canonical order with a setting unknown: nothing to say.
func CanonicalUnknown(attempts int) (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	r, _ := retry.New(retry.MaxAttempts(attempts))
	t, _ := timeout.New(time.Second, timeout.Latency(0.99, 100*time.Millisecond))
	return chain.New(r, b, t)
}

// A slice of policies: not followed.
func Slice() (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	r, _ := retry.New(retry.MaxAttempts(3))
	ps := []chain.Policy{b, r}
	return chain.New(ps...)
}

// In a loop, the loop variable is unknown.
func Loop() {
	for _, n := range []int{3, 5} {
		r, _ := retry.New(retry.MaxAttempts(n))
		b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
		t, _ := timeout.New(time.Second, timeout.Latency(0.99, 100*time.Millisecond))
		_, _ = chain.New(b, r, t) // want `CG002 \(unknown to the analyzer: n\)`
	}
}

// A variable assigned twice: unknown.
func Reassigned() (*chain.Chain, error) {
	r, _ := retry.New(retry.MaxAttempts(3))
	r, _ = retry.New(retry.MaxAttempts(5))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	t, _ := timeout.New(time.Second, timeout.Latency(0.99, 100*time.Millisecond))
	return chain.New(r, b, t)
}

type mine struct{}

func (mine) Do(ctx context.Context, call func(context.Context) error) error { return call(ctx) }

// A user's own policy: an opaque step, as for chain.New; the rest is
// still checked.
func Own() (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	return chain.New(mine{}, b) // want `CG009`
}

// Suppressed, with a reason.
func Ignored() (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	//callguard:ignore CG009 the calls below have deadlines of their own
	return chain.New(b)
}

// A suppression needs its reason.
func IgnoredWithoutReason() (*chain.Chain, error) {
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	//callguard:ignore CG009 // want `needs a reason`
	return chain.New(b) // want `CG009`
}

// A constructor that will fail, and an Options the analyzer can read.
func WillFail() {
	_, _ = retry.New(retry.MaxAttempts(0)) // want `retry.New will fail: retry: MaxAttempts\(0\)`
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	_, _ = chain.Options{Strict: true}.New(b) // want `chain.New will fail: chain: error CG009`
}

// Strict fails on warnings, not on infos: this one builds.
func StrictInfo() (*chain.Chain, error) {
	r, _ := retry.New(retry.MaxAttempts(3))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	t, _ := timeout.New(time.Second)
	return chain.Options{Strict: true}.New(r, b, t) // want `info CG015`
}

// A setting unknown, and a rule that hangs on settings: not said.
func SettingsRule(d time.Duration) (*chain.Chain, error) {
	o, _ := timeout.New(d)
	r, _ := retry.New(retry.MaxAttempts(3))
	b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 5})
	t, _ := timeout.New(time.Second, timeout.Latency(0.99, 100*time.Millisecond))
	return chain.New(o, r, b, t) // CG005 would need the overall timeout's value
}
