package chain_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/internal/hold"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errDown = errors.New("down")

// opaque is a user's own policy: it counts the calls through it.
type opaque struct{ calls int }

func (o *opaque) Do(ctx context.Context, call func(context.Context) error) error {
	o.calls++
	return call(ctx)
}

func TestOrderFirstIsOutermost(t *testing.T) {
	var trace []string
	mark := func(name string) chain.Policy { return tracer{name, &trace} }
	c := must(chain.New(mark("a"), mark("b"), mark("c")))
	_ = c.Do(context.Background(), func(context.Context) error { trace = append(trace, "call"); return nil })
	if got := len(trace); got != 7 || trace[0] != "a>" || trace[3] != "call" || trace[6] != "<a" {
		t.Errorf("trace %v, want a> b> c> call <c <b <a", trace)
	}
	if c.String() != "tracer(a) → tracer(b) → tracer(c)" {
		t.Errorf("String() = %q", c)
	}
}

type tracer struct {
	name  string
	trace *[]string
}

func (p tracer) Do(ctx context.Context, call func(context.Context) error) error {
	*p.trace = append(*p.trace, p.name+">")
	err := call(ctx)
	*p.trace = append(*p.trace, "<"+p.name)
	return err
}
func (p tracer) String() string { return "tracer(" + p.name + ")" }

// TestFusedTimeouts: an overall and an attempt timeout give each attempt one
// context with the sooner deadline; with the caller's deadline sooner, the
// call gets the caller's context itself.
func TestFusedTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		overall, attempt := to(2*time.Second), to(300*time.Millisecond)
		r := rt(retry.MaxAttempts(10), retry.Constant(500*time.Millisecond), retry.Jitter(0))
		c := must(chain.New(overall, r, br(fiveConsecutive), attempt))
		start := time.Now()
		var deadlines []time.Duration
		err := c.Do(context.Background(), func(ctx context.Context) error {
			dl, _ := ctx.Deadline()
			deadlines = append(deadlines, dl.Sub(start))
			<-ctx.Done()
			return ctx.Err()
		})
		// Attempts start at 0, 0.8 and 1.6 s (300 ms each, then a 500 ms
		// wait) and each ends on its own 300 ms deadline. A fourth would
		// start at 2.4 s, past the overall 2 s: the retry stops at 1.9 s.
		want := []time.Duration{300 * time.Millisecond, 1100 * time.Millisecond, 1900 * time.Millisecond}
		if len(deadlines) != 3 || deadlines[0] != want[0] || deadlines[1] != want[1] || deadlines[2] != want[2] {
			t.Errorf("attempt deadlines %v, want %v", deadlines, want)
		}
		var ex *retry.ExhaustedError
		if !errors.As(err, &ex) || ex.Reason != retry.ReasonDeadline || !timeout.Expired(err) || time.Since(start) != 1900*time.Millisecond {
			t.Errorf("got %v at %v, want the retry to stop on the overall deadline at 1.9 s", err, time.Since(start))
		}

		// The caller's deadline is sooner than both: no context is made.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = c.Do(ctx, func(got context.Context) error {
			if got != ctx {
				t.Error("the chain made a context although the caller's deadline is sooner")
			}
			return nil
		})
	})
}

// TestOverallDeadlineIsNeutralForBreaker: when the overall timeout (outside
// the breaker) ends an attempt, the breaker does not count it as a failure.
func TestOverallDeadlineIsNeutralForBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := br(breaker.Settings{ConsecutiveFailures: 1})
		c := must(chain.New(to(100*time.Millisecond), b, to(time.Second)))
		err := c.Do(context.Background(), func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		if !timeout.Expired(err) || b.State() != breaker.StateClosed || b.Counts().Neutral != 1 {
			t.Errorf("got %v, state %v, counts %+v; want a timeout counted neutral", err, b.State(), b.Counts())
		}
		// The attempt timeout inside the breaker is a failure.
		c = must(chain.New(to(time.Second), b, to(100*time.Millisecond)))
		_ = c.Do(context.Background(), func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		if b.State() != breaker.StateOpen {
			t.Errorf("state %v after an attempt timeout, want open", b.State())
		}
	})
}

func TestOpaquePolicyAndFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &opaque{}
		b := br(breaker.Settings{ConsecutiveFailures: 1})
		served := 0
		fb := must(fallback.New(func(ctx context.Context, err error) error { served++; return nil }))
		c := must(chain.New(fb, o, to(time.Second), b, to(500*time.Millisecond)))
		var deadline time.Duration
		start := time.Now()
		err := c.Do(context.Background(), func(ctx context.Context) error {
			dl, _ := ctx.Deadline()
			deadline = dl.Sub(start)
			return errDown
		})
		if !errors.Is(err, errDown) || deadline != 500*time.Millisecond || o.calls != 1 {
			t.Errorf("got %v, deadline %v, opaque calls %d; want errDown, 500ms, 1", err, deadline, o.calls)
		}
		// Open now: the fallback answers.
		if err := c.Do(context.Background(), func(context.Context) error { return nil }); err != nil || served != 1 {
			t.Errorf("got %v with %d fallbacks, want nil from the fallback", err, served)
		}
	})
}

func TestPanicRecordsFailure(t *testing.T) {
	b := br(breaker.Settings{ConsecutiveFailures: 1})
	c := must(chain.New(rt(), b))
	func() {
		defer func() { _ = recover() }()
		_ = c.Do(context.Background(), func(context.Context) error { panic("boom") })
	}()
	if b.State() != breaker.StateOpen {
		t.Errorf("state %v after a panic, want open", b.State())
	}
}

func TestZeroAllocRetryBreaker(t *testing.T) {
	c := must(chain.New(rt(), br(fiveConsecutive)))
	ctx := context.Background()
	call := func(context.Context) error { return nil }
	if n := testing.AllocsPerRun(1000, func() { _ = c.Do(ctx, call) }); n != 0 {
		t.Errorf("retry → breaker allocates %v per call, want 0", n)
	}
	var nilChain *chain.Chain
	if err := nilChain.Do(ctx, call); err != nil {
		t.Errorf("nil chain: %v", err)
	}
}

// TestHolder: a call that holds its attempt context keeps it alive after it
// returns, until released; without Hold the chain cancels it at once.
func TestHolder(t *testing.T) {
	c := must(chain.New(to(time.Minute)))
	var kept context.Context
	ctx := hold.WithHolder(context.Background())
	var held *hold.Held
	_ = c.Do(ctx, func(ctx context.Context) error {
		kept = ctx
		held = hold.Hold(ctx)
		return nil
	})
	if kept.Err() != nil {
		t.Fatal("held attempt context canceled when the call returned")
	}
	held.Release()
	if kept.Err() == nil {
		t.Fatal("release did not cancel the attempt context")
	}
	held.Release() // twice is fine
	_ = c.Do(ctx, func(ctx context.Context) error { kept = ctx; return nil })
	if kept.Err() == nil {
		t.Fatal("an attempt context that was not held outlived its call")
	}
	// Without WithHolder, Hold has nothing to hold.
	_ = c.Do(context.Background(), func(ctx context.Context) error {
		kept, held = ctx, hold.Hold(ctx)
		return nil
	})
	if kept.Err() == nil || held != nil {
		t.Fatal("Hold kept an attempt context without WithHolder")
	}
	held.Release() // nil: does nothing
	if ps := c.Policies(); len(ps) != 1 {
		t.Fatalf("Policies() = %v", ps)
	}
}

// capture is a user's own policy that keeps the context it was given.
type capture struct{ ctx context.Context }

func (c *capture) Do(ctx context.Context, call func(context.Context) error) error {
	c.ctx = ctx
	return call(ctx)
}

// twoAtOnce is a user's own policy that runs two calls at once and returns the
// first result.
type twoAtOnce struct{}

func (twoAtOnce) Do(ctx context.Context, call func(context.Context) error) error {
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- call(ctx) }()
	}
	err := <-errs
	<-errs
	return err
}

// TestHolderNested: attempt contexts nested through a policy of the user's
// or a nested chain are all canceled when their calls return; a Hold on
// the inner one keeps the outer one too, until released; concurrent
// attempts under a hedging policy each have their own.
func TestHolderNested(t *testing.T) {
	outer := &capture{}
	for _, c := range []*chain.Chain{
		must(chain.New(to(time.Hour), outer, rt(), to(time.Minute))),
		must(chain.New(to(time.Hour), outer, must(chain.New(to(time.Minute))))),
		must(chain.New(to(time.Hour), outer, twoAtOnce{}, to(time.Minute))),
	} {
		for _, holding := range []bool{false, true} {
			var mu sync.Mutex
			var inner []context.Context
			var releases []*hold.Held
			ctx := hold.WithHolder(context.Background())
			err := c.Do(ctx, func(ctx context.Context) error {
				mu.Lock()
				defer mu.Unlock()
				inner = append(inner, ctx)
				if holding {
					releases = append(releases, hold.Hold(ctx))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			dl, ok := inner[0].Deadline()
			if !ok || time.Until(dl) > time.Minute || outer.ctx == nil {
				t.Fatalf("%v: the call's deadline is %v away, want the inner timeout's minute", c, time.Until(dl))
			}
			if _, ok := outer.ctx.Deadline(); !ok || outer.ctx == inner[0] {
				t.Fatalf("%v: the outer policy saw no attempt context of its own", c)
			}
			inner = append(inner, outer.ctx)
			for _, ic := range inner {
				if alive := ic.Err() == nil; alive != holding {
					t.Errorf("%v, hold %t: attempt context alive after the call: %t", c, holding, alive)
				}
			}
			for _, h := range releases {
				h.Release()
			}
			for _, ic := range inner {
				if ic.Err() == nil {
					t.Errorf("%v, hold %t: attempt context alive after release", c, holding)
				}
			}
		}
	}
}

// TestHoldShared: calls sharing one attempt context (two hedged calls under
// one timeout) each hold it; it lives until both holds are released, and a
// hold released twice counts once.
func TestHoldShared(t *testing.T) {
	c := must(chain.New(to(time.Minute), twoAtOnce{}))
	var mu sync.Mutex
	var ctxs []context.Context
	var helds []*hold.Held
	err := c.Do(hold.WithHolder(context.Background()), func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		ctxs, helds = append(ctxs, ctx), append(helds, hold.Hold(ctx))
		return nil
	})
	if err != nil || len(helds) != 2 || ctxs[0] != ctxs[1] {
		t.Fatalf("got %v, %d holds; want two calls sharing one context", err, len(helds))
	}
	helds[0].Release()
	helds[0].Release()
	if ctxs[0].Err() != nil {
		t.Fatal("canceled while the second call still holds it")
	}
	helds[1].Release()
	if ctxs[0].Err() == nil {
		t.Fatal("alive after both holds were released")
	}
}

// TestPanicCancelsAttempt: a call that panics does not leave its attempt
// context to its deadline, with or without WithHolder.
func TestPanicCancelsAttempt(t *testing.T) {
	c := must(chain.New(to(time.Hour)))
	for _, ctx := range []context.Context{context.Background(), hold.WithHolder(context.Background())} {
		var actx context.Context
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic did not go on")
				}
			}()
			_ = c.Do(ctx, func(ctx context.Context) error { actx = ctx; panic("boom") })
		}()
		if actx.Err() == nil {
			t.Error("an attempt context outlived a panicking call")
		}
	}
}

// TestNeedsHolder: a chain that makes attempt contexts, itself or through a
// nested chain, says it needs a Holder, and a Holder keeps its attempt
// context alive; a chain that makes none says so.
func TestNeedsHolder(t *testing.T) {
	inner := must(chain.New(to(time.Minute)))
	for _, tc := range []struct {
		c    *chain.Chain
		want bool
	}{
		{must(chain.New()), false},
		{must(chain.New(must(retry.New()))), false},
		{must(chain.New(must(retry.New()), br(breaker.Settings{}))), false},
		{must(chain.New(must(retry.New()), to(time.Minute))), true},
		{must(chain.New(to(time.Minute), must(retry.New()))), true},
		{must(chain.New(must(retry.New()), inner)), true},
	} {
		for _, holding := range []bool{false, true} {
			var attemptCtx context.Context
			var held *hold.Held
			call := func(ctx context.Context) error {
				attemptCtx, held = ctx, hold.Hold(ctx)
				return nil
			}
			ctx := context.Background()
			if holding {
				_ = bridge.ChainDoHolding(tc.c, ctx, call) // no WithHolder needed
			} else {
				ctx = hold.WithHolder(ctx)
				_ = tc.c.Do(ctx, call)
			}
			made := attemptCtx != ctx
			if got := bridge.ChainNeedsHolder(tc.c); got != tc.want || made != tc.want || (held != nil) != tc.want {
				t.Errorf("%v, DoHolding %t: NeedsHolder() = %t, made an attempt context: %t, held: %t; want %t", tc.c, holding, got, made, held != nil, tc.want)
			}
			if attemptCtx.Err() != nil {
				t.Errorf("%v, DoHolding %t: a held attempt context was canceled when the call returned", tc.c, holding)
			}
			held.Release()
			if tc.want && attemptCtx.Err() == nil {
				t.Errorf("%v, DoHolding %t: alive after release", tc.c, holding)
			}
		}
	}
	var nilChain *chain.Chain
	if bridge.ChainNeedsHolder(nilChain) {
		t.Error("a nil chain needs a Holder")
	}
}

// TestFallbackWithinTimeout: a fallback inside a timeout runs within it: a
// fallback slower than the deadline ends with the timeout's error, as the
// same policies nested by hand do.
func TestFallbackWithinTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := must(fallback.New(func(ctx context.Context, err error) error {
			select {
			case <-time.After(time.Hour):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, fallback.OnAnyFailure()))
		c := must(chain.New(to(100*time.Millisecond), slow))
		start := time.Now()
		err := c.Do(context.Background(), func(context.Context) error { return errDown })
		if !timeout.Expired(err) || time.Since(start) != 100*time.Millisecond {
			t.Errorf("got %v after %v; want the timeout's error at 100ms", err, time.Since(start))
		}
		byHand := to(100*time.Millisecond).Do(context.Background(), func(ctx context.Context) error {
			return slow.Do(ctx, func(context.Context) error { return errDown })
		})
		if !timeout.Expired(byHand) {
			t.Errorf("by hand: %v, want the timeout's error", byHand)
		}
		// A quick fallback still answers a failure within the deadline, but
		// not the timeout itself: it has run out of time too.
		quick := must(fallback.New(func(context.Context, error) error { return nil }, fallback.OnAnyFailure()))
		qc := must(chain.New(to(100*time.Millisecond), quick))
		if err := qc.Do(context.Background(), func(context.Context) error { return errDown }); err != nil {
			t.Errorf("quick fallback: %v", err)
		}
		hang := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
		if err := qc.Do(context.Background(), hang); !timeout.Expired(err) {
			t.Errorf("quick fallback of a call the timeout ended: %v, want the timeout's error", err)
		}
	})
}

// TestOursAfterCallerEnds: an attempt the chain's timeout ended is the
// timeout's, even when the call returns after the caller's deadline passed
// too.
func TestOursAfterCallerEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := must(chain.New(to(time.Second)))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := c.Do(ctx, func(context.Context) error {
			time.Sleep(3 * time.Second) // ignores its context
			return context.DeadlineExceeded
		})
		if !timeout.Expired(err) {
			t.Errorf("got %v, want the chain timeout's", err)
		}
	})
}

// TestFitDeadline: with 1 s to the deadline, a 300 ms attempt timeout and
// waits of 100 and 200 ms, two hung attempts leave the third 100 ms
// (at 900 ms), too little for an answer that takes 150 ms; retry.FitDeadline
// shortens the second wait so the third starts at 700 ms with its 300 ms,
// and the call succeeds.
func TestFitDeadline(t *testing.T) {
	for _, fit := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			opts := []retry.Option{retry.MaxAttempts(3), retry.Exponential(100*time.Millisecond, time.Second), retry.Jitter(0)}
			if fit {
				opts = append(opts, retry.FitDeadline())
			}
			r, err := retry.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			at, err := timeout.New(300 * time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			c, err := chain.Options{Ignore: []string{"CG009"}}.New(r, at)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			var starts []time.Duration
			err = c.Do(ctx, func(ctx context.Context) error {
				starts = append(starts, time.Since(start))
				if len(starts) < 3 {
					<-ctx.Done() // hangs
					return ctx.Err()
				}
				select {
				case <-time.After(150 * time.Millisecond):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			want := []time.Duration{0, 400 * time.Millisecond, 900 * time.Millisecond}
			if fit {
				want[2] = 700 * time.Millisecond
			}
			if !slices.Equal(starts, want) {
				t.Errorf("FitDeadline %t: attempts at %v, want %v", fit, starts, want)
			}
			if ok := err == nil; ok != fit {
				t.Errorf("FitDeadline %t: %v, want success %t", fit, err, fit)
			}
		})
	}
}
