//go:build race

package limit_test

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// pooled paths allocate.
const raceEnabled = true
