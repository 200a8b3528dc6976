package limit

import (
	"context"
	"time"
)

// BulkheadSettings configures a [Bulkhead]. MaxConcurrent must be set; the
// other fields' zero values mean no queue.
type BulkheadSettings struct {
	// MaxConcurrent is the number of calls in flight at once (>= 1).
	MaxConcurrent int
	// MaxQueue is the number of calls that may wait for a slot when all
	// are taken, served first come, first served. 0: no queue; a call that
	// finds every slot taken is rejected at once.
	MaxQueue int
	// MaxWait bounds how long a call waits in the queue before it is
	// rejected (Reason ReasonMaxWait). 0: a queued call waits until a slot
	// frees or its context ends, however long that is. MaxWait needs a
	// queue (MaxQueue > 0). Keep it below the callers' deadlines: a call
	// that waits out its caller's deadline in the queue has spent it all
	// on waiting.
	MaxWait time.Duration
}

// normalize validates s.
func (s BulkheadSettings) normalize() error {
	switch {
	case s.MaxConcurrent < 1:
		return invalid("BulkheadSettings.MaxConcurrent", s.MaxConcurrent, "must be >= 1")
	case s.MaxQueue < 0:
		return invalid("BulkheadSettings.MaxQueue", s.MaxQueue, "must be >= 0")
	case s.MaxWait < 0:
		return invalid("BulkheadSettings.MaxWait", s.MaxWait, "must be >= 0")
	case s.MaxWait > 0 && s.MaxQueue == 0:
		return invalid("BulkheadSettings.MaxWait", s.MaxWait, "needs a queue: set MaxQueue > 0, or MaxWait to 0")
	}
	return nil
}

// Bulkhead caps the calls in flight to a downstream at a fixed number,
// with a bounded FIFO queue for the calls that find every slot taken. A
// call that finds the queue full, or waits MaxWait in it, is refused with
// a [*RejectedError]; one whose context ends while it waits gets the
// context's error and leaves the queue.
//
// Most callers should use [Bulkhead.Do]; [Bulkhead.Acquire] and [Permit]
// are for interceptors and streams. A Bulkhead is safe for concurrent use.
// Create one with [NewBulkhead]; the zero value admits no call.
type Bulkhead struct {
	c core
	s BulkheadSettings
}

// NewBulkhead returns a Bulkhead for s, or a [*SettingsError] naming the
// first invalid field.
func NewBulkhead(s BulkheadSettings) (*Bulkhead, error) {
	if err := s.normalize(); err != nil {
		return nil, err
	}
	b := &Bulkhead{s: s}
	b.c.init(s.MaxConcurrent, s.MaxQueue, s.MaxWait)
	return b, nil
}

// Settings returns the bulkhead's settings.
func (b *Bulkhead) Settings() BulkheadSettings { return b.s }

// Acquire takes a slot for one call, waiting in the queue if every slot is
// taken and the queue has room: the two-step form of [Bulkhead.Do]. On
// success, make the call and release the slot with [Permit.Done] (or
// [Permit.DoneNeutral]) exactly once. It returns a [*RejectedError] if the
// queue is full or the call waited MaxWait, and ctx's error if ctx ended
// while the call waited (a ctx that has ended is admitted if a slot is
// free: checking it is the call's business). A nil ctx never ends.
func (b *Bulkhead) Acquire(ctx context.Context) (Permit, error) {
	if _, err := b.c.acquire(ctx); err != nil {
		return Permit{}, err
	}
	return Permit{c: &b.c}, nil
}

// Do runs call once a slot is free and releases the slot when call
// returns. A refused call is not run: Do returns a [*RejectedError]
// (matching [ErrLimited] and callguard.ErrRejected), or ctx's error if ctx
// ended while the call waited. Otherwise Do returns call's error
// unchanged. A call that panics releases its slot and the panic goes on.
func (b *Bulkhead) Do(ctx context.Context, call func(context.Context) error) error {
	p, err := b.Acquire(ctx)
	if err != nil {
		return err
	}
	return p.run(ctx, call)
}

// Limit returns MaxConcurrent (0 for the zero Bulkhead).
func (b *Bulkhead) Limit() int { return int(b.c.limit.Load()) }

// InFlight returns the number of calls holding a slot.
func (b *Bulkhead) InFlight() int { return int(b.c.inflight.Load()) }

// Queued returns the number of calls waiting in the queue.
func (b *Bulkhead) Queued() int { return int(b.c.queued.Load()) }
