//go:debug randseednop=0

package bench

import (
	mathrand "math/rand"
	"strings"
	"sync"
)

// globalRand serializes the runs that draw from math/rand's global source.
var globalRand sync.Mutex

// drawsGlobal reports a stack whose draws come from math/rand's global
// source: the hand-wired peers (backoff/v4's jitter). callguard's stacks
// draw from their run's seed (retry.Rand, throttle.Settings.Rand), and so
// do failsafe-go's retries with jitter (failsafeBackoff); failsafe-go's
// adaptivethrottler draws from math/rand/v2's global source, which no
// seed reaches: the -throttler rows alone vary from run to run.
func drawsGlobal(def stackDef) bool { return strings.HasPrefix(def.name, "handwired") }

// seedGlobal seeds math/rand's global source, which backoff/v4 draws its
// jitter from (the hand-wired peers), so that their runs replay too. Go
// 1.24 made rand.Seed a no-op unless randseednop=0, set above for this
// test binary.
func seedGlobal(seed uint64) {
	//lint:ignore SA1019 the only way to replay backoff/v4's draws
	mathrand.Seed(int64(seed))
}
