package limit_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/limit"
)

func mustBulkhead(t *testing.T, s limit.BulkheadSettings) *limit.Bulkhead {
	t.Helper()
	b, err := limit.NewBulkhead(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// acquirer is the subset of Bulkhead and Limiter the queue tests use.
type acquirer interface {
	Acquire(context.Context) (limit.Permit, error)
	InFlight() int
	Queued() int
}

type result struct {
	p   limit.Permit
	err error
	at  time.Time
}

// enqueue starts a goroutine that calls Acquire and waits until it is
// admitted or blocked in the queue.
func enqueue(ctx context.Context, a acquirer) <-chan result {
	ch := make(chan result, 1)
	go func() {
		p, err := a.Acquire(ctx)
		ch <- result{p, err, time.Now()}
	}()
	synctest.Wait()
	return ch
}

func wantRejected(t *testing.T, err error, want limit.RejectedError) {
	t.Helper()
	var re *limit.RejectedError
	if !errors.As(err, &re) {
		t.Fatalf("got %v, want a *RejectedError", err)
	}
	if *re != want {
		t.Fatalf("got %+v, want %+v", *re, want)
	}
	if !errors.Is(err, limit.ErrLimited) || !errors.Is(err, callguard.ErrRejected) {
		t.Fatalf("%v: does not match ErrLimited and callguard.ErrRejected", err)
	}
}

// TestBulkheadAdmitQueueReject: MaxConcurrent calls are admitted, the next
// MaxQueue wait, the one after is rejected at once ("queue full"); a freed
// slot admits the head of the queue, and a waiter past MaxWait is rejected
// with Waited == MaxWait.
func TestBulkheadAdmitQueueReject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := mustBulkhead(t, limit.BulkheadSettings{MaxConcurrent: 2, MaxQueue: 2, MaxWait: 100 * time.Millisecond})
		p1, err1 := b.Acquire(ctx)
		_, err2 := b.Acquire(ctx)
		if err1 != nil || err2 != nil {
			t.Fatalf("first two: %v, %v; want admitted", err1, err2)
		}
		first := enqueue(ctx, b)
		time.Sleep(10 * time.Millisecond)
		second := enqueue(ctx, b)
		if got := b.Queued(); got != 2 {
			t.Fatalf("Queued() = %d, want 2", got)
		}
		_, err := b.Acquire(ctx)
		wantRejected(t, err, limit.RejectedError{Limit: 2, InFlight: 2, Queued: 2, Reason: limit.ReasonQueueFull})

		p1.Done(nil)
		synctest.Wait()
		select {
		case r := <-first:
			if r.err != nil {
				t.Fatalf("head of the queue: %v, want admitted", r.err)
			}
		default:
			t.Fatal("a freed slot did not admit the head of the queue")
		}
		if q, f := b.Queued(), b.InFlight(); q != 1 || f != 2 {
			t.Fatalf("Queued, InFlight = %d, %d; want 1, 2", q, f)
		}
		r := <-second // waits out MaxWait in virtual time
		wantRejected(t, r.err, limit.RejectedError{Limit: 2, InFlight: 2, Queued: 0, Waited: 100 * time.Millisecond, Reason: limit.ReasonMaxWait})
		if b.Queued() != 0 {
			t.Fatalf("Queued() = %d after the rejection, want 0", b.Queued())
		}
	})
}

// TestBulkheadFIFO: waiters are admitted in the order they came.
func TestBulkheadFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := mustBulkhead(t, limit.BulkheadSettings{MaxConcurrent: 1, MaxQueue: 5})
		p, _ := b.Acquire(ctx)
		var waiters []<-chan result
		for range 5 {
			waiters = append(waiters, enqueue(ctx, b))
		}
		for i, w := range waiters {
			p.Done(nil)
			synctest.Wait()
			for j := i + 1; j < len(waiters); j++ {
				if len(waiters[j]) != 0 {
					t.Fatalf("waiter %d admitted before waiter %d", j, i)
				}
			}
			r := <-w
			if r.err != nil {
				t.Fatalf("waiter %d: %v", i, r.err)
			}
			p = r.p
		}
		p.Done(nil)
		if b.InFlight() != 0 || b.Queued() != 0 {
			t.Fatalf("InFlight, Queued = %d, %d; want 0, 0", b.InFlight(), b.Queued())
		}
	})
}

// TestBulkheadWaiterContextEnds: a waiter whose context ends gets the
// context's error (not a rejection) and leaves the queue; MaxWait 0 waits
// as long as the context allows.
func TestBulkheadWaiterContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBulkhead(t, limit.BulkheadSettings{MaxConcurrent: 1, MaxQueue: 2})
		p, _ := b.Acquire(context.Background())
		cctx, cancel := context.WithCancel(context.Background())
		canceled := enqueue(cctx, b)
		dctx, cancel2 := context.WithTimeout(context.Background(), time.Hour)
		defer cancel2()
		start := time.Now()
		timedOut := enqueue(dctx, b)
		if b.Queued() != 2 {
			t.Fatalf("Queued() = %d, want 2", b.Queued())
		}
		cancel()
		r := <-canceled
		if !errors.Is(r.err, context.Canceled) || errors.Is(r.err, limit.ErrLimited) {
			t.Fatalf("canceled waiter: %v, want context.Canceled only", r.err)
		}
		if b.Queued() != 1 {
			t.Fatalf("Queued() = %d after the cancellation, want 1", b.Queued())
		}
		r = <-timedOut
		if !errors.Is(r.err, context.DeadlineExceeded) || r.at.Sub(start) != time.Hour {
			t.Fatalf("waiter with a deadline: %v after %v, want context.DeadlineExceeded after 1h", r.err, r.at.Sub(start))
		}
		if b.Queued() != 0 || b.InFlight() != 1 {
			t.Fatalf("Queued, InFlight = %d, %d; want 0, 1", b.Queued(), b.InFlight())
		}
		// A caller whose context has already ended does not queue.
		if _, err := b.Acquire(cctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire with an ended context: %v, want context.Canceled", err)
		}
		p.Done(nil)
		// ... but is admitted when a slot is free: the call decides.
		p, err := b.Acquire(cctx)
		if err != nil {
			t.Fatalf("free slot, ended context: %v, want admitted", err)
		}
		p.Done(nil)
	})
}

// TestBulkheadNoQueue: with MaxQueue 0 a full bulkhead rejects at once.
func TestBulkheadNoQueue(t *testing.T) {
	b := mustBulkhead(t, limit.BulkheadSettings{MaxConcurrent: 1})
	p, _ := b.Acquire(context.Background())
	_, err := b.Acquire(context.Background())
	wantRejected(t, err, limit.RejectedError{Limit: 1, InFlight: 1, Reason: limit.ReasonQueueFull})
	p.Done(nil)
	if _, err := b.Acquire(context.Background()); err != nil {
		t.Fatalf("after Done: %v, want admitted", err)
	}
}

// TestBulkheadSettingsErrors: each invalid setting is named.
func TestBulkheadSettingsErrors(t *testing.T) {
	for _, tc := range []struct {
		s     limit.BulkheadSettings
		field string
	}{
		{limit.BulkheadSettings{}, "BulkheadSettings.MaxConcurrent"},
		{limit.BulkheadSettings{MaxConcurrent: -1}, "BulkheadSettings.MaxConcurrent"},
		{limit.BulkheadSettings{MaxConcurrent: 1, MaxQueue: -1}, "BulkheadSettings.MaxQueue"},
		{limit.BulkheadSettings{MaxConcurrent: 1, MaxQueue: 1, MaxWait: -1}, "BulkheadSettings.MaxWait"},
		{limit.BulkheadSettings{MaxConcurrent: 1, MaxWait: time.Second}, "BulkheadSettings.MaxWait"},
	} {
		_, err := limit.NewBulkhead(tc.s)
		var se *limit.SettingsError
		if !errors.As(err, &se) || se.Field != tc.field {
			t.Errorf("NewBulkhead(%+v): %v, want a SettingsError for %s", tc.s, err, tc.field)
		}
	}
}

// TestDoEdges: Do returns the call's error unchanged; a nil call panics
// as in breaker.Do, after admission, and the slot is released; a nil ctx
// is passed to the call as it is; the zero value admits nothing.
func TestDoEdges(t *testing.T) {
	b := mustBulkhead(t, limit.BulkheadSettings{MaxConcurrent: 1})
	l := mustLimiter(t, limit.Settings{InitialLimit: 1})
	for name, p := range map[string]interface {
		Do(context.Context, func(context.Context) error) error
		InFlight() int
	}{"bulkhead": b, "limiter": l} {
		errCall := errors.New("call failed")
		if err := p.Do(context.Background(), func(context.Context) error { return errCall }); err != errCall {
			t.Errorf("%s: Do = %v, want the call's error unchanged", name, err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Do with a nil call did not panic", name)
				}
			}()
			_ = p.Do(context.Background(), nil)
		}()
		if p.InFlight() != 0 {
			t.Errorf("%s: InFlight() = %d after a panicking call, want 0", name, p.InFlight())
		}
		var got context.Context = context.Background()
		//lint:ignore SA1012 a nil ctx is what is tested
		err := p.Do(nil, func(ctx context.Context) error { got = ctx; return nil }) //nolint:staticcheck
		if err != nil || got != nil {
			t.Errorf("%s: Do(nil ctx) = %v, call got ctx %v; want nil, nil", name, err, got)
		}
	}
	var zb limit.Bulkhead
	var zl limit.Limiter
	if err := zb.Do(context.Background(), func(context.Context) error { return nil }); err == nil {
		t.Error("zero Bulkhead admitted a call")
	}
	if _, err := zl.Acquire(context.Background()); err == nil {
		t.Error("zero Limiter admitted a call")
	}
	var p limit.Permit
	p.Done(nil)
	p.DoneNeutral()
}
