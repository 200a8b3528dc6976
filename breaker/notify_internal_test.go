package breaker

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/internal/bridge"
)

var errDownstream = errors.New("downstream down")

// watchScript drives b through closed→open, open→half-open, half-open→open,
// open→half-open and half-open→closed (1 probe, a stay of 1 s), and returns
// the changes it made, in order, with their instants.
func watchScript(t *testing.T, b *Breaker) []StateChange {
	t.Helper()
	ctx := context.Background()
	fail := func(context.Context) error { return errDownstream }
	ok := func(context.Context) error { return nil }
	t0 := time.Now()
	_ = b.Do(ctx, fail) // closed→open
	time.Sleep(2 * time.Second)
	_ = b.Do(ctx, fail) // open→half-open, half-open→open
	time.Sleep(2 * time.Second)
	_ = b.Do(ctx, ok) // open→half-open, half-open→closed
	name := b.s.Name
	return []StateChange{
		{Name: name, From: StateClosed, To: StateOpen, At: t0},
		{Name: name, From: StateOpen, To: StateHalfOpen, At: t0.Add(2 * time.Second)},
		{Name: name, From: StateHalfOpen, To: StateOpen, At: t0.Add(2 * time.Second)},
		{Name: name, From: StateOpen, To: StateHalfOpen, At: t0.Add(4 * time.Second)},
		{Name: name, From: StateHalfOpen, To: StateClosed, At: t0.Add(4 * time.Second)},
	}
}

// keyed returns want with Key set to key.
func keyed(want []StateChange, key string) []StateChange {
	out := slices.Clone(want)
	for i := range out {
		out[i].Key = key
	}
	return out
}

// unlocked fails the test if a lock of b is held.
func unlocked(t *testing.T, b *Breaker) {
	t.Helper()
	if b.m != nil {
		if !b.m.mu.TryLock() {
			t.Error("a watcher was called with the breaker's lock held")
		} else {
			b.m.mu.Unlock()
		}
	}
	if n := b.note.Load(); !n.mu.TryLock() {
		t.Error("a watcher was called with the notifier's lock held")
	} else {
		n.mu.Unlock()
	}
}

func watchSettings(engine Engine) Settings {
	return Settings{Name: "payments", Engine: engine, ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenProbes: 1}
}

// TestBreakerWatch: the watchers added through bridge.BreakerWatch get
// every change with the breaker's Name, their own Key, From, To and the
// instant it happened, in order, on both engines, with no lock held: a
// watcher may call State and Counts.
func TestBreakerWatch(t *testing.T) {
	for _, engine := range []Engine{EngineNative, EngineGobreaker} {
		synctest.Test(t, func(t *testing.T) {
			b, err := New(watchSettings(engine))
			if err != nil {
				t.Fatal(err)
			}
			var gotA, gotB []StateChange
			var seen []State
			bridge.BreakerWatch(b, "host-a", func(c StateChange) {
				unlocked(t, b)
				seen = append(seen, b.State())
				_ = b.Counts()
				gotA = append(gotA, c)
			})
			bridge.BreakerWatch(b, "host-b", func(c StateChange) { gotB = append(gotB, c) })
			want := watchScript(t, b)
			if !slices.Equal(gotA, keyed(want, "host-a")) {
				t.Errorf("engine %v: watcher host-a got\n%v\nwant\n%v", engine, gotA, keyed(want, "host-a"))
			}
			if !slices.Equal(gotB, keyed(want, "host-b")) {
				t.Errorf("engine %v: watcher host-b got\n%v\nwant\n%v", engine, gotB, keyed(want, "host-b"))
			}
			if wantSeen := []State{StateOpen, StateHalfOpen, StateOpen, StateHalfOpen, StateClosed}; !slices.Equal(seen, wantSeen) {
				t.Errorf("engine %v: State() from the watcher: got %v, want %v", engine, seen, wantSeen)
			}
		})
	}
}

// TestBreakerWatchWithOnStateChange: OnStateChange gets each change
// before the watchers do.
func TestBreakerWatchWithOnStateChange(t *testing.T) {
	for _, engine := range []Engine{EngineNative, EngineGobreaker} {
		synctest.Test(t, func(t *testing.T) {
			var log []string
			s := watchSettings(engine)
			s.OnStateChange = func(from, to State) { log = append(log, fmt.Sprintf("OnStateChange %v→%v", from, to)) }
			b, err := New(s)
			if err != nil {
				t.Fatal(err)
			}
			bridge.BreakerWatch(b, "k", func(c StateChange) { log = append(log, fmt.Sprintf("watcher %v→%v", c.From, c.To)) })
			_ = b.Do(context.Background(), func(context.Context) error { return errDownstream })
			if want := []string{"OnStateChange closed→open", "watcher closed→open"}; !slices.Equal(log, want) {
				t.Errorf("engine %v: got %v, want %v", engine, log, want)
			}
		})
	}
}

// TestBreakerWatchPanic: a watcher that panics does not wedge the
// deliveries: the panic reaches the call that made the change, the other
// watchers get that change at the breaker's next event, and every
// watcher gets each later change, exactly once and in order.
func TestBreakerWatchPanic(t *testing.T) {
	for _, engine := range []Engine{EngineNative, EngineGobreaker} {
		synctest.Test(t, func(t *testing.T) {
			b, err := New(watchSettings(engine))
			if err != nil {
				t.Fatal(err)
			}
			var gotP, gotB []StateChange
			bridge.BreakerWatch(b, "panics", func(c StateChange) {
				gotP = append(gotP, c)
				if len(gotP) == 1 {
					panic("watcher")
				}
			})
			bridge.BreakerWatch(b, "b", func(c StateChange) { gotB = append(gotB, c) })
			ctx := context.Background()
			var panicked any
			func() {
				defer func() { panicked = recover() }()
				_ = b.Do(ctx, func(context.Context) error { return errDownstream })
			}()
			if panicked != "watcher" {
				t.Fatalf("engine %v: the call that tripped: recovered %v, want the watcher's panic", engine, panicked)
			}
			if c := b.Counts(); c.Failures != 1 || b.State() != StateOpen {
				t.Fatalf("engine %v: state %v, counts %+v; want open, 1 failure", engine, b.State(), c)
			}
			time.Sleep(2 * time.Second)
			if err := b.Do(ctx, func(context.Context) error { return nil }); err != nil {
				t.Fatalf("engine %v: the probe: got %v, want it admitted", engine, err)
			}
			t0 := time.Now().Add(-2 * time.Second)
			want := []StateChange{
				{Name: "payments", From: StateClosed, To: StateOpen, At: t0},
				{Name: "payments", From: StateOpen, To: StateHalfOpen, At: t0.Add(2 * time.Second)},
				{Name: "payments", From: StateHalfOpen, To: StateClosed, At: t0.Add(2 * time.Second)},
			}
			if !slices.Equal(gotP, keyed(want, "panics")) {
				t.Errorf("engine %v: the panicking watcher got\n%v\nwant\n%v", engine, gotP, keyed(want, "panics"))
			}
			if !slices.Equal(gotB, keyed(want, "b")) {
				t.Errorf("engine %v: the other watcher got\n%v\nwant\n%v", engine, gotB, keyed(want, "b"))
			}
		})
	}
}

// TestOnStateChangeGoexit: a callback that ends its goroutine with
// runtime.Goexit (as t.FailNow does) leaves the notifier usable: the
// other receivers and the later changes are still delivered (it used to
// unlock an unlocked mutex, a fatal error).
func TestOnStateChangeGoexit(t *testing.T) {
	for _, engine := range []Engine{EngineNative, EngineGobreaker} {
		synctest.Test(t, func(t *testing.T) {
			var calls []string
			s := watchSettings(engine)
			s.OnStateChange = func(from, to State) {
				calls = append(calls, fmt.Sprintf("%v→%v", from, to))
				if len(calls) == 1 {
					runtime.Goexit()
				}
			}
			b, err := New(s)
			if err != nil {
				t.Fatal(err)
			}
			var watched []State
			bridge.BreakerWatch(b, "k", func(c StateChange) { watched = append(watched, c.To) })
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = b.Do(context.Background(), func(context.Context) error { return errDownstream })
			}()
			<-done
			time.Sleep(2 * time.Second)
			_ = b.Do(context.Background(), func(context.Context) error { return nil })
			if want := []string{"closed→open", "open→half-open", "half-open→closed"}; !slices.Equal(calls, want) {
				t.Errorf("engine %v: OnStateChange got %v, want %v", engine, calls, want)
			}
			if want := []State{StateOpen, StateHalfOpen, StateClosed}; !slices.Equal(watched, want) {
				t.Errorf("engine %v: the watcher got %v, want %v", engine, watched, want)
			}
		})
	}
}

// TestNoReceiverQueuesNothing: a breaker with neither OnStateChange nor
// watchers has no notifier and queues no change, on both engines.
func TestNoReceiverQueuesNothing(t *testing.T) {
	for _, engine := range []Engine{EngineNative, EngineGobreaker} {
		synctest.Test(t, func(t *testing.T) {
			b, err := New(watchSettings(engine))
			if err != nil {
				t.Fatal(err)
			}
			watchScript(t, b)
			if n := b.note.Load(); n != nil {
				t.Errorf("engine %v: a notifier (queue of %d), want none", engine, len(n.q))
			}
		})
	}
}

// TestBridgeHooksBadArguments: the hooks do nothing, and do not panic,
// for a nil breaker, a nil watcher, or a breaker made by FromGobreaker.
func TestBridgeHooksBadArguments(t *testing.T) {
	b, err := New(watchSettings(EngineNative))
	if err != nil {
		t.Fatal(err)
	}
	bridge.BreakerWatch(nil, "k", func(StateChange) {})
	bridge.BreakerWatch((*Breaker)(nil), "k", func(StateChange) {})
	bridge.BreakerWatch(b, "k", nil)
	bridge.BreakerWatch(b, "k", (func(StateChange))(nil))
	if n := b.note.Load(); n != nil {
		t.Errorf("got %d watchers, want no notifier", len(n.watchers))
	}
	if until := bridge.BreakerOpenUntil((*Breaker)(nil)); !until.IsZero() {
		t.Errorf("BreakerOpenUntil(nil) = %v, want the zero time", until)
	}
}

// TestUnwatch: a receiver removed by the function watch returned is not
// called again; the others are.
func TestUnwatch(t *testing.T) {
	b, err := New(Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var gone, kept int
	unwatch := b.watch("a", func(StateChange) { gone++ })
	b.watch("b", func(StateChange) { kept++ })
	unwatch()
	_ = b.Do(context.Background(), func(context.Context) error { return errDownstream })
	if gone != 0 || kept != 1 {
		t.Errorf("removed receiver called %d times, kept one %d; want 0 and 1", gone, kept)
	}
}
