// Package seeded draws random numbers from a source a user gives a policy
// (retry.Rand, throttle.Settings.Rand), so that a run can be replayed: the
// same source, seeded alike, gives the same draws in the same order.
package seeded

import (
	"math/rand/v2"
	"sync"
)

// Rand is a source made safe for concurrent use: math/rand/v2's sources
// are not.
type Rand struct {
	mu sync.Mutex
	r  *rand.Rand
}

// New returns a Rand drawing from src.
func New(src rand.Source) *Rand { return &Rand{r: rand.New(src)} }

// Float64 returns a number in [0, 1) from the source.
func (r *Rand) Float64() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.r.Float64()
}
