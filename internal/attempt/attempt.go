// Package attempt is the one owner of a call's attempts in an adapter: it
// numbers them, knows which are in flight, and alone decides which one won
// and whether an attempt may still be sent. A hedge, a retry or a user's
// own policy may start attempts of one adapter call at once or one after
// another; the adapters (httpmw's exchange, grpcmw's unary call) carry the
// attempts out and ask their Call, and keep no won or busy state of their
// own (the model is grpc-go's clientStream, whose commit is made in one
// place and whose stale attempts' results are dropped).
//
// The invariants a Call keeps:
//   - at most one attempt commits (wins), and none after the call is over;
//   - once an attempt committed, or the call is over, no attempt is sent:
//     Begin refuses it with an error matching callguard.ErrRejected
//     (refused before sending, which a hedge refunds);
//   - an attempt that was sent and answered after another committed is
//     lost: its answer is dropped by the adapter and the attempt ends with
//     [ErrLost], which does not match callguard.ErrRejected (it was sent:
//     a hedge keeps its token spent);
//   - a call that may be sent once only (a request that is not
//     idempotent) has one attempt at most, whatever policy asks for more:
//     Begin refuses the second, at once with the first or after it;
//   - every attempt that began ends once ([Attempt.Finish] is idempotent).
package attempt

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/retry"
)

// Call is the attempts of one adapter call. Its zero value is ready; it is
// safe for concurrent use, and it must not be copied after first use.
type Call struct {
	mu       sync.Mutex
	started  int  // attempts begun
	inflight int  // attempts begun and not finished
	won      int  // the number of the attempt that committed, 0 if none
	over     bool // the call has its result: no attempt may begin
	repeat   bool // an attempt may follow the first (the call may be retried)
	tried    [4]uint64
	ntried   int // endpoints tried, the last len(tried) of them kept
}

// Key is the key under which an adapter's call answers its own Call from
// its attempts' contexts (see [Of]): a load-balancing layer below the
// adapter (package endpoint) reads the endpoints its attempts went to.
type Key struct{}

// Of returns the Call of the adapter call that ctx belongs to, or nil.
func Of(ctx context.Context) *Call {
	c, _ := ctx.Value(Key{}).(*Call)
	return c
}

// Tried reports whether an attempt of the call went to the endpoint id
// (one of the last four the call tried).
func (c *Call) Tried(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range min(c.ntried, len(c.tried)) {
		if c.tried[i] == id {
			return true
		}
	}
	return false
}

// Repeatable reports whether the call may be sent again (idempotent),
// as its last Begin said.
func (c *Call) Repeatable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.repeat
}

// Try records that an attempt of the call goes to the endpoint id.
func (c *Call) Try(id uint64) {
	c.mu.Lock()
	c.tried[c.ntried%len(c.tried)] = id
	c.ntried++
	c.mu.Unlock()
}

// Attempt is one attempt of a Call, from [Call.Begin]. Finish it once it
// has its answer (more calls to Finish do nothing).
type Attempt struct {
	c *Call
	// N numbers the attempt from 1 in the order they began.
	N int
	// Alone reports that no other attempt was in flight when it began:
	// it may use what the caller gave for one answer (a gRPC reply, the
	// caller's header and trailer options).
	Alone bool
	ended bool
}

// Refusals of Begin. They are local (callguard.ErrRejected), neutral to
// breakers and final to a retry: the attempt was never sent.
var (
	ErrOver = refuse("attempt: the call already has its answer (another attempt won, or the call returned)")
	ErrOnce = refuse("attempt: a second attempt of a call that may be sent once only (not idempotent)")
)

// ErrLost ends an attempt that was sent and answered after another
// attempt of the call had won: its answer is dropped. It is neutral to
// breakers, final to a retry, and does not match callguard.ErrRejected:
// unlike a refusal, the attempt reached the downstream.
var ErrLost = breaker.Neutral(retry.Permanent(lost{}))

type lost struct{}

func (lost) Error() string { return "attempt: answered after another attempt of the call had won" }

// Begin starts an attempt, or refuses it (the attempt must not be sent)
// with [ErrOver] once an attempt has committed or the call is over, and
// with [ErrOnce] when repeat is false (the call may be sent once only) and
// an attempt has begun before.
func (c *Call) Begin(repeat bool) (Attempt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.over || c.won != 0:
		return Attempt{}, ErrOver
	case c.started > 0 && !repeat:
		return Attempt{}, ErrOnce
	}
	c.started++
	c.inflight++
	c.repeat = repeat
	return Attempt{c: c, N: c.started, Alone: c.inflight == 1}, nil
}

// Commit makes a the call's winner if no attempt has won and the call is
// not over, and reports whether it did; an attempt that does not commit
// lost the race: drop its answer and end it with [ErrLost]. fn, if not
// nil, runs under the call's lock when a commits: what the winner keeps
// is set there, before any other attempt can look.
func (a *Attempt) Commit(fn func()) bool {
	c := a.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over || c.won != 0 {
		return false
	}
	c.won = a.N
	if fn != nil {
		fn()
	}
	return true
}

// Do runs fn under the call's lock, unless the call is won or over; it
// reports whether fn ran. A failing attempt keeps its answer so (the
// caller gets the last failure if none wins), and never over a winner's.
func (a *Attempt) Do(fn func()) bool {
	c := a.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over || c.won != 0 {
		return false
	}
	fn()
	return true
}

// Finish ends the attempt: it is no longer in flight. It is idempotent.
func (a *Attempt) Finish() {
	if a.c == nil || a.ended {
		return
	}
	a.ended = true
	a.c.mu.Lock()
	a.c.inflight--
	a.c.mu.Unlock()
}

// Close ends the call: no attempt begins or commits after it. It returns
// the number of attempts begun, the number of the winner (0: none) and
// how many are still in flight (a policy that left one running).
func (c *Call) Close() (started, won, inflight int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.over = true
	return c.started, c.won, c.inflight
}

// Won reports whether an attempt has committed.
func (c *Call) Won() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.won != 0
}

// Started returns the number of attempts begun.
func (c *Call) Started() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

// refusal is an attempt refused before it was sent: a local refusal.
type refusal string

func (r refusal) Error() string      { return string(r) }
func (refusal) Is(target error) bool { return target == callguard.ErrRejected }

func refuse(s string) error { return breaker.Neutral(retry.Permanent(refusal(s))) }

// Queued is the error of an attempt that its deadline cut while it had
// spent most of its time in the client's own queue (a slot of an HTTP
// connection pool at its bound, a gRPC stream quota: a wait for a
// connection that exists) rather than on the downstream's time (making a
// connection for it, or with the connection). The wait is the client's,
// and says nothing of the downstream's health. It is neutral to breakers
// (wrapped in breaker.Neutral by [Pooled]) and unwraps to the attempt's
// error.
type Queued struct {
	Err    error
	Waited time.Duration // in the client's queue
	OnWire time.Duration // the downstream's time before the cut: making a connection, or with one
}

func (e *Queued) Error() string {
	return fmt.Sprintf("attempt: cut after %v waiting for a connection of the client's own and %v on the downstream's time: %v", e.Waited, e.OnWire, e.Err)
}
func (e *Queued) Unwrap() error { return e.Err }

// Pooled judges an attempt that began at start with the deadline dl and
// ended with err at now, down of which, up to its deadline, was the
// downstream's time: making a connection for it (a dial, a handshake, a
// gRPC channel CONNECTING), or with its connection. The rest was the
// client's own wait, for a connection that exists (a slot of its pool, a
// stream quota). If its deadline cut it before it had half its time on the
// downstream's, err is returned as a neutral [*Queued]; otherwise err as
// it is. The half is the chain's default patience of an attempt timeout: a
// downstream healthy enough answers within it.
func Pooled(err error, start, dl, now time.Time, down time.Duration) error {
	if err == nil || now.Before(dl) {
		return err
	}
	budget := dl.Sub(start)
	down = min(max(down, 0), budget)
	if 2*down < budget {
		return breaker.Neutral(&Queued{Err: err, Waited: budget - down, OnWire: down})
	}
	return err
}

// Wire records an attempt's time on the downstream's side, for [Pooled] to
// judge it: when it reached the downstream (an HTTP request got its
// connection; a gRPC call's header went out), and how long it waited
// before that for a connection to be made (a gRPC pick that waited for a
// ready transport). Reached and Connected may be called from any
// goroutine, Judge after the attempt returned.
type Wire struct {
	start, deadline time.Time
	mu              sync.Mutex
	reached         time.Time // guarded by mu
	connected       time.Time // guarded by mu
}

// Start starts w for an attempt whose deadline is dl, now.
func (w *Wire) Start(dl time.Time) { w.start, w.deadline = time.Now(), dl }

// Reached records that the attempt reached the downstream, now; only the
// first call counts.
func (w *Wire) Reached() {
	w.mu.Lock()
	if w.reached.IsZero() {
		w.reached = time.Now()
	}
	w.mu.Unlock()
}

// Connected records that the attempt, which waited from its start for a
// connection to be made, has one now; only the first call counts. The wait
// is the downstream's time.
func (w *Wire) Connected() {
	w.mu.Lock()
	if w.connected.IsZero() {
		w.connected = time.Now()
	}
	w.mu.Unlock()
}

// Bare reports whether neither Reached nor Connected was called, and the
// time since the attempt started.
func (w *Wire) Bare() (bool, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reached.IsZero() && w.connected.IsZero(), time.Since(w.start)
}

// Judge returns err as the attempt's, by [Pooled]: neutral if its deadline
// cut it before it had half its time on the downstream's. That time is
// what Connected and Reached recorded, or making if larger: what the
// adapter knows the attempt, still without a connection, spent waiting
// for one to be made.
func (w *Wire) Judge(err error, making time.Duration) error {
	if err == nil {
		return nil
	}
	now := time.Now()
	end := now // the downstream's time is counted up to the deadline
	if w.deadline.Before(now) {
		end = w.deadline
	}
	w.mu.Lock()
	reached, connected := w.reached, w.connected
	w.mu.Unlock()
	var down time.Duration
	if !connected.IsZero() {
		down = min(connected.Sub(w.start), end.Sub(w.start))
	}
	if !reached.IsZero() {
		down += max(end.Sub(reached), 0)
	}
	return Pooled(err, w.start, w.deadline, now, max(down, making))
}
