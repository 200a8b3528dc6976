package breaker

import (
	"sync/atomic"
	"unsafe"
)

// counterShards is the number of cache lines a hot counter is spread over.
const counterShards = 8

// stripedCounter is a counter that many goroutines add to at once without
// fighting over one cache line, and that costs one word until they do (as
// Java's LongAdder): an Add goes to a base word with a compare-and-swap;
// the first time that fails, because another goroutine added at the same
// instant, the counter spreads over counterShards cache lines, each Add
// going to a shard picked from the address of the calling goroutine's
// stack (distinct goroutines have distinct stacks; a collision only costs
// contention). Load sums them. A breaker per key on a quiet key keeps its
// 8 bytes; a busy one pays 512 more.
type stripedCounter struct {
	base  atomic.Uint64
	cells atomic.Pointer[[counterShards]paddedUint64]
}

type paddedUint64 struct {
	n atomic.Uint64
	_ [56]byte
}

func (c *stripedCounter) Add(n uint64) {
	if cells := c.cells.Load(); cells != nil {
		cells[shard()].n.Add(n)
		return
	}
	if old := c.base.Load(); c.base.CompareAndSwap(old, old+n) {
		return
	}
	c.spread()[shard()].n.Add(n)
}

// spread returns the shards, making them if no other goroutine has.
func (c *stripedCounter) spread() *[counterShards]paddedUint64 {
	if cells := c.cells.Load(); cells != nil {
		return cells
	}
	c.cells.CompareAndSwap(nil, new([counterShards]paddedUint64))
	return c.cells.Load()
}

func (c *stripedCounter) Load() uint64 {
	sum := c.base.Load()
	if cells := c.cells.Load(); cells != nil {
		for i := range cells {
			sum += cells[i].n.Load()
		}
	}
	return sum
}

// shard picks a shard for the calling goroutine from its stack address.
func shard() uintptr {
	var here byte
	return uintptr(unsafe.Pointer(&here)) >> 11 % counterShards // 2 KiB: the smallest stack
}
