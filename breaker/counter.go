package breaker

import (
	"sync/atomic"
	"unsafe"
)

// counterShards is the number of cache lines a hot counter is spread over.
const counterShards = 8

// shardedCounter is a counter that many goroutines add to at once without
// fighting over one cache line: each Add goes to a shard picked from the
// address of the calling goroutine's stack (distinct goroutines have distinct
// stacks; a collision only costs contention), and Load sums them.
type shardedCounter struct {
	shards [counterShards]struct {
		n atomic.Uint64
		_ [56]byte
	}
}

func (c *shardedCounter) Add(n uint64) {
	c.shards[shard()].n.Add(n)
}

// shard picks a shard for the calling goroutine from its stack address.
func shard() uintptr {
	var here byte
	return uintptr(unsafe.Pointer(&here)) >> 11 % counterShards // 2 KiB: the smallest stack
}

func (c *shardedCounter) Load() uint64 {
	var sum uint64
	for i := range c.shards {
		sum += c.shards[i].n.Load()
	}
	return sum
}
