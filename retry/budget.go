package retry

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Budget caps retries across calls, in the style of the SRE book's retry
// budget: a token bucket that every call fills by Ratio tokens and time
// fills by MinPerSecond tokens a second; each retry takes one token, and a
// retry finding none is not made. Under a total outage retries are then at
// most Ratio per call plus MinPerSecond a second, plus the bucket's
// starting burst, so over N calls attempts per call stay at most
// 1 + Ratio + MinPerSecond / (calls per second) + burst / N. The bucket
// starts with the tokens of 100 calls and one second (the burst) and holds
// at most that, or one token if that is less.
//
// A Budget is safe for concurrent use. A call adds its tokens with one
// atomic add; only a retry takes the lock. Create one with [NewBudget]; the
// zero Budget allows no retry at all.
type Budget struct {
	ratio, perSecond, capacity float64

	calls atomic.Uint64

	mu        sync.Mutex
	tokens    float64
	seenCalls uint64
	last      time.Time
}

// NewBudget returns a budget of ratio retries per call, in [0, 1], plus
// minPerSecond retries a second, >= 0.
func NewBudget(ratio, minPerSecond float64) (*Budget, error) {
	switch {
	case !(ratio >= 0 && ratio <= 1):
		return nil, fmt.Errorf("retry: NewBudget ratio = %v: must be within [0, 1]", ratio)
	case !(minPerSecond >= 0) || math.IsInf(minPerSecond, 1):
		return nil, fmt.Errorf("retry: NewBudget minPerSecond = %v: must be a finite number >= 0", minPerSecond)
	}
	burst := 100*ratio + minPerSecond
	// The bucket starts with the burst, so NewBudget(0, 0) allows no retry
	// at all; it can hold at least one token, so a small ratio adds up to
	// a retry.
	return &Budget{ratio: ratio, perSecond: minPerSecond, capacity: max(1, burst), tokens: burst, last: time.Now()}, nil
}

func (b *Budget) deposit() { b.calls.Add(1) }

// level returns the tokens in the bucket now.
func (b *Budget) level() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settle(time.Now())
	return b.tokens
}

// settle adds the deposits and the time's tokens since the last settling;
// b.mu held.
func (b *Budget) settle(now time.Time) {
	calls := b.calls.Load()
	b.tokens += b.ratio*float64(calls-b.seenCalls) + b.perSecond*now.Sub(b.last).Seconds()
	b.tokens = min(b.tokens, b.capacity)
	b.seenCalls, b.last = calls, now
}

// withdraw takes a token for one retry, if there is one. Deposits are
// settled here, lazily: they are all positive, so adding them up before
// capping gives what capping each would.
func (b *Budget) withdraw() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settle(time.Now())
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
