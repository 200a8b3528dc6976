//go:debug randseednop=0

package bench

import mathrand "math/rand"

// seedGlobal seeds math/rand's global source, which backoff/v4 draws its
// jitter from (the hand-wired peer), so that its runs replay too. Go 1.24
// made rand.Seed a no-op unless randseednop=0, set above for this test
// binary. math/rand/v2's global source (failsafe-go's) cannot be seeded:
// its rows vary from run to run by what its jitter draws.
func seedGlobal(seed uint64) {
	//lint:ignore SA1019 the only way to replay backoff/v4's draws
	mathrand.Seed(int64(seed))
}
