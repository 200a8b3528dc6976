package attempt

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
)

func TestCall(t *testing.T) {
	var c Call
	a1, err := c.Begin(false)
	if err != nil || a1.N != 1 || !a1.Alone {
		t.Fatalf("first Begin: %+v, %v; want attempt 1 alone", a1, err)
	}
	if _, err := c.Begin(false); !errors.Is(err, ErrOnce) || !errors.Is(err, callguard.ErrRejected) {
		t.Errorf("a second Begin of a call sent once only: %v; want ErrOnce, a local refusal", err)
	}
	a2, err := c.Begin(true)
	if err != nil || a2.N != 2 || a2.Alone {
		t.Fatalf("Begin of a call that may repeat: %+v, %v; want attempt 2, not alone", a2, err)
	}
	kept := 0
	if !a2.Commit(func() { kept = 2 }) || kept != 2 {
		t.Fatal("the first Commit did not win")
	}
	if a1.Commit(func() { kept = 1 }) || kept != 2 {
		t.Error("a second Commit won")
	}
	if a1.Do(func() { kept = -1 }) || kept != 2 {
		t.Error("Do ran after a commit")
	}
	if _, err := c.Begin(true); !errors.Is(err, ErrOver) {
		t.Errorf("Begin after a commit: %v; want ErrOver", err)
	}
	if errors.Is(ErrLost, callguard.ErrRejected) || !errors.Is(ErrLost, ErrLost) {
		t.Error("ErrLost matches callguard.ErrRejected: a sent attempt would be refunded")
	}
	a1.Finish()
	a1.Finish() // idempotent
	a2.Finish()
	if started, won, inflight := c.Close(); started != 2 || won != 2 || inflight != 0 {
		t.Errorf("Close: %d started, winner %d, %d in flight; want 2, 2, 0", started, won, inflight)
	}
}

// TestOneWinner: many attempts at once, each committing: exactly one wins
// (run with -race).
func TestOneWinner(t *testing.T) {
	var c Call
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := c.Begin(true)
			if err != nil {
				return // refused: another won first
			}
			defer a.Finish()
			if a.Commit(nil) {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if started, won, inflight := c.Close(); wins != 1 || won == 0 || won > started || inflight != 0 {
		t.Errorf("%d wins (winner %d of %d, %d in flight); want exactly 1", wins, won, started, inflight)
	}
}

func TestRefusalsNeutral(t *testing.T) {
	for _, err := range []error{ErrOver, ErrOnce, ErrLost} {
		b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 1})
		p, _ := b.Allow(t.Context())
		p.Done(err)
		if b.State() != breaker.StateClosed {
			t.Errorf("%v opened a breaker; want neutral", err)
		}
	}
}

func TestOnce(t *testing.T) {
	var c Call
	a, err := c.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	a.Finish()
	if _, err := c.Begin(false); !errors.Is(err, ErrOnce) {
		t.Errorf("a second attempt, after the first ended, of a call sent once only: %v; want ErrOnce", err)
	}
}

// TestWire: an attempt cut by its deadline before half its time with the
// downstream is the client's wait (neutral, *Queued), one cut after is the
// downstream's; the first Reached counts; virtual time.
func TestWire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cut := context.DeadlineExceeded
		judge := func(queued, onWire time.Duration) error {
			var w Wire
			w.Start(time.Now().Add(queued + onWire))
			time.Sleep(queued)
			w.Reached()
			time.Sleep(onWire / 2)
			w.Reached() // not the first: ignored
			time.Sleep(onWire - onWire/2)
			return w.Judge(cut, 0)
		}
		neutral := func(err error) bool {
			b, _ := breaker.New(breaker.Settings{ConsecutiveFailures: 1})
			_ = b.Do(context.Background(), func(context.Context) error { return err })
			return b.State() == breaker.StateClosed
		}
		if err := judge(30*time.Millisecond, 20*time.Millisecond); !errors.As(err, new(*Queued)) || !neutral(err) {
			t.Errorf("30 ms queued, 20 ms on the wire: %v, want a neutral *Queued", err)
		}
		if err := judge(20*time.Millisecond, 30*time.Millisecond); err != cut {
			t.Errorf("20 ms queued, 30 ms on the wire: %v, want the cut as it is", err)
		}
		var w Wire
		w.Start(time.Now().Add(time.Second))
		if err := w.Judge(cut, 0); err != cut {
			t.Errorf("before its deadline: %v, want the error as it is", err)
		}
		if w.Judge(nil, 0) != nil {
			t.Error("a success judged a failure")
		}
	})
}

// TestWireConnecting: the time an attempt waited for a connection to be
// made is the downstream's, with its time on the wire after it: 30 ms
// connecting, 10 ms for stream quota and 10 ms on the wire make 40 ms of
// 50 on the downstream's time (the cut is the downstream's); 10 ms
// connecting, 30 ms for quota and 10 on the wire make 20 (the client's
// wait). An attempt that the adapter knows spent its whole time without a
// connection, waiting for one to be made (making), is the downstream's;
// with making 20 ms of 50, the client's. Virtual time.
func TestWireConnecting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cut := context.DeadlineExceeded
		judge := func(connecting, quota, onWire time.Duration) error {
			var w Wire
			w.Start(time.Now().Add(connecting + quota + onWire))
			time.Sleep(connecting)
			if bare, _ := w.Bare(); !bare {
				t.Error("Bare: false before Connected")
			}
			w.Connected()
			time.Sleep(quota)
			w.Reached()
			time.Sleep(onWire)
			return w.Judge(cut, 0)
		}
		if err := judge(30*time.Millisecond, 10*time.Millisecond, 10*time.Millisecond); err != cut {
			t.Errorf("30 ms connecting, 10 for quota, 10 on the wire: %v, want the cut as it is", err)
		}
		var q *Queued
		if err := judge(10*time.Millisecond, 30*time.Millisecond, 10*time.Millisecond); !errors.As(err, &q) || q.OnWire != 20*time.Millisecond || q.Waited != 30*time.Millisecond {
			t.Errorf("10 ms connecting, 30 for quota, 10 on the wire: %v, want a *Queued of 30 ms waited, 20 on the downstream's time", err)
		}
		making := func(d time.Duration) error {
			var w Wire
			w.Start(time.Now().Add(50 * time.Millisecond))
			time.Sleep(50 * time.Millisecond)
			bare, since := w.Bare()
			if !bare || since != 50*time.Millisecond {
				t.Errorf("Bare: %t, %v; want true, 50ms", bare, since)
			}
			return w.Judge(cut, d)
		}
		if err := making(50 * time.Millisecond); err != cut {
			t.Errorf("50 ms of 50 making a connection: %v, want the cut as it is", err)
		}
		if err := making(20 * time.Millisecond); !errors.As(err, new(*Queued)) {
			t.Errorf("20 ms of 50 making a connection: %v, want a *Queued", err)
		}
	})
}
