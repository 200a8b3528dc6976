//go:build race

package endpoints

// raceOn: the race detector slows every call several times over, and the
// cases' forty backends and hundred callers saturate the cores; the
// goal's times and rates are then reported, not held (see failures).
const raceOn = true
