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
			return w.Judge(cut)
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
		if err := w.Judge(cut); err != cut {
			t.Errorf("before its deadline: %v, want the error as it is", err)
		}
		if w.Judge(nil) != nil {
			t.Error("a success judged a failure")
		}
	})
}
