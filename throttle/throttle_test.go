package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/throttle"
)

var errDown = errors.New("unavailable")

func mustNew(t testing.TB, s throttle.Settings) *throttle.Throttle {
	t.Helper()
	th, err := throttle.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

// finish makes n calls that end with err (those admitted): each counts as
// a request, admitted or not. It returns how many were rejected.
func finish(th *throttle.Throttle, n int, err error) (rejected int) {
	for range n {
		p, rerr := th.Allow(context.Background())
		if rerr != nil {
			rejected++
			continue
		}
		p.Done(err)
	}
	return rejected
}

func wantCounts(t *testing.T, th *throttle.Throttle, requests, accepts int) {
	t.Helper()
	if r, a := th.Counts(); r != requests || a != accepts {
		t.Fatalf("Counts() = %d requests, %d accepts; want %d, %d", r, a, requests, accepts)
	}
}

func wantRate(t *testing.T, th *throttle.Throttle, want float64) {
	t.Helper()
	if got := th.RejectionRate(); got != want {
		t.Fatalf("RejectionRate() = %v, want %v", got, want)
	}
}

// The SRE book's formula, p = (requests − K·accepts) / (requests + 1),
// pinned on the window's counts.
func TestRejectionRateFormula(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 100 requests, 0 accepts: 100/101, uncapped with MaxRejectionRate 1.
		th := mustNew(t, throttle.Settings{MaxRejectionRate: 1})
		finish(th, 100, errDown)
		wantCounts(t, th, 100, 0)
		wantRate(t, th, 100.0/101)

		// The same with the default cap.
		th = mustNew(t, throttle.Settings{})
		finish(th, 100, errDown)
		wantRate(t, th, 0.9)

		// 100 requests, 40 accepts: (100 − 80)/101.
		th = mustNew(t, throttle.Settings{})
		if r := finish(th, 40, nil); r != 0 {
			t.Fatalf("%d of 40 accepted calls rejected, want 0", r)
		}
		finish(th, 60, errDown)
		wantCounts(t, th, 100, 40)
		wantRate(t, th, 20.0/101)

		// K = 3: (100 − 120)/101 < 0: nothing rejected.
		th = mustNew(t, throttle.Settings{K: 3})
		finish(th, 40, nil)
		finish(th, 60, errDown)
		wantRate(t, th, 0)

		// All accepted: 0.
		th = mustNew(t, throttle.Settings{})
		if r := finish(th, 1000, nil); r != 0 {
			t.Fatalf("%d of 1000 accepted calls rejected, want 0", r)
		}
		wantCounts(t, th, 1000, 1000)
		wantRate(t, th, 0)

		// Exactly half accepted with K = 2: (100 − 100)/101 = 0.
		th = mustNew(t, throttle.Settings{MinRequests: 1})
		for range 50 {
			finish(th, 1, nil)
			finish(th, 1, errDown)
		}
		wantCounts(t, th, 100, 50)
		wantRate(t, th, 0)
	})
}

func TestMinRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := mustNew(t, throttle.Settings{}) // MinRequests 20
		if r := finish(th, 19, errDown); r != 0 {
			t.Fatalf("%d of 19 calls rejected below MinRequests, want 0", r)
		}
		wantRate(t, th, 0)
		// The 20th is decided on 19 requests: admitted too.
		if r := finish(th, 1, errDown); r != 0 {
			t.Fatal("the 20th call was rejected, want admitted (19 requests before it)")
		}
		wantRate(t, th, 0.9) // 20/21, capped

		th = mustNew(t, throttle.Settings{MinRequests: 1, MaxRejectionRate: 1})
		finish(th, 1, errDown)
		wantRate(t, th, 0.5) // one refusal: 1/2
	})
}

// The window forgets: a request counts for Window (to a tenth of it),
// then leaves.
func TestWindowForgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := mustNew(t, throttle.Settings{Window: 10 * time.Second})
		finish(th, 100, errDown)
		time.Sleep(5 * time.Second)
		finish(th, 10, nil) // p = 0.9: about 1 admitted
		r1, _ := th.Counts()
		if r1 != 110 {
			t.Fatalf("requests = %d, want 110", r1)
		}
		time.Sleep(5*time.Second - 1) // the first bucket is 10s − 1ns old: still in
		if r, _ := th.Counts(); r != 110 {
			t.Fatalf("at 10s − 1ns: requests = %d, want 110", r)
		}
		time.Sleep(time.Nanosecond) // 10s: the first 100 leave
		if r, _ := th.Counts(); r != 10 {
			t.Fatalf("at 10s: requests = %d, want 10", r)
		}
		wantRate(t, th, 0) // below MinRequests
		time.Sleep(5 * time.Second)
		wantCounts(t, th, 0, 0)
		wantRate(t, th, 0)
		if r := finish(th, 1000, nil); r != 0 {
			t.Fatalf("after the window: %d of 1000 rejected, want 0", r)
		}
	})
}

// Rejected calls count as requests, so p stays up while the downstream
// refuses, as the SRE book says; accepted calls bring it down.
func TestRejectionsCountAsRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := mustNew(t, throttle.Settings{MaxRejectionRate: 1})
		rejected := finish(th, 1000, errDown)
		if rejected < 900 {
			t.Fatalf("%d of 1000 calls rejected, want most", rejected)
		}
		wantCounts(t, th, 1000, 0)
		wantRate(t, th, 1000.0/1001)
	})
}

// Neutral outcomes take their request back: the caller's own end, another
// local policy's rejection, DoneNeutral.
func TestNeutral(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := mustNew(t, throttle.Settings{})
		canceled, cancel := context.WithCancel(context.Background())
		cancel()
		p, err := th.Allow(canceled)
		if err != nil {
			t.Fatal(err)
		}
		p.Done(context.Canceled)
		wantCounts(t, th, 0, 0)

		short, cancel2 := context.WithTimeout(context.Background(), time.Second)
		defer cancel2()
		p, _ = th.Allow(short)
		time.Sleep(time.Second) // the deadline has passed
		p.Done(errDown)
		wantCounts(t, th, 0, 0)

		p, _ = th.Allow(context.Background())
		p.Done(fmt.Errorf("inner: %w", callguard.ErrRejected))
		wantCounts(t, th, 0, 0)

		p, _ = th.Allow(context.Background())
		p.DoneNeutral()
		wantCounts(t, th, 0, 0)

		// A nil error is accepted even after the caller left: the
		// downstream answered.
		p, _ = th.Allow(canceled)
		p.Done(nil)
		wantCounts(t, th, 1, 1)

		// A refusal counts, and an unrelated error with a live context too.
		p, _ = th.Allow(context.Background())
		p.Done(errDown)
		wantCounts(t, th, 2, 1)

		// The zero Permit does nothing.
		throttle.Permit{}.Done(nil)
		throttle.Permit{}.DoneNeutral()
		wantCounts(t, th, 2, 1)
	})
}

func TestIsAccepted(t *testing.T) {
	errInvalid := errors.New("invalid argument")
	var asked []error
	th := mustNew(t, throttle.Settings{IsAccepted: func(err error) bool {
		asked = append(asked, err)
		return errors.Is(err, errInvalid)
	}})
	finish(th, 3, errInvalid)
	finish(th, 2, errDown)
	finish(th, 1, nil)
	finish(th, 1, callguard.ErrRejected)
	wantCounts(t, th, 6, 4)
	if len(asked) != 5 {
		t.Fatalf("IsAccepted asked %d times, want 5 (not for nil, not for ErrRejected)", len(asked))
	}
}

func TestDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := mustNew(t, throttle.Settings{MaxRejectionRate: 1})
		ran := 0
		for range 100 {
			err := th.Do(context.Background(), func(context.Context) error { ran++; return errDown })
			if err != errDown {
				var re *throttle.RejectedError
				if !errors.As(err, &re) || !errors.Is(err, throttle.ErrThrottled) || !errors.Is(err, callguard.ErrRejected) {
					t.Fatalf("Do: %v (%T), want errDown or a *RejectedError matching ErrThrottled and callguard.ErrRejected", err, err)
				}
				if re.Accepts != 0 || re.Requests < 20 || re.Probability != float64(re.Requests)/float64(re.Requests+1) || re.Window != time.Minute {
					t.Fatalf("RejectedError = %+v, want p = requests/(requests+1), at least 20 requests, 0 accepts, window 1m", *re)
				}
			}
		}
		if ran < 20 || ran == 100 {
			t.Fatalf("call ran %d times in 100, want at least 20 (MinRequests) and some rejected", ran)
		}
		wantCounts(t, th, 100, 0)

		// Do returns call's error unchanged, and passes ctx as given.
		th = mustNew(t, throttle.Settings{})
		type key struct{}
		ctx := context.WithValue(context.Background(), key{}, 1)
		err := th.Do(ctx, func(got context.Context) error {
			if got != ctx {
				t.Error("call got another context")
			}
			return errDown
		})
		if err != errDown {
			t.Fatalf("Do = %v, want errDown", err)
		}
		//lint:ignore SA1012 a nil ctx is passed through, as breaker.Do does
		if err := th.Do(nil, func(got context.Context) error {
			if got != nil {
				t.Error("call got a non-nil context")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, th, 2, 1)
	})
}

func TestDoPanics(t *testing.T) {
	th := mustNew(t, throttle.Settings{})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Do with a nil call did not panic")
			}
		}()
		_ = th.Do(context.Background(), nil)
	}()
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want boom", r)
			}
		}()
		_ = th.Do(context.Background(), func(context.Context) error { panic("boom") })
	}()
	wantCounts(t, th, 2, 0) // both count as refusals
}

func TestZeroThrottle(t *testing.T) {
	var th throttle.Throttle
	if _, err := th.Allow(context.Background()); err == nil || errors.Is(err, throttle.ErrThrottled) {
		t.Fatalf("zero Allow: %v, want an error not matching ErrThrottled", err)
	}
	if err := th.Do(context.Background(), func(context.Context) error { t.Error("ran"); return nil }); err == nil {
		t.Fatal("zero Do: nil error")
	}
	wantRate(t, &th, 0)
	wantCounts(t, &th, 0, 0)
}

func TestRejectedError(t *testing.T) {
	e := &throttle.RejectedError{Probability: 0.42, Requests: 120, Accepts: 35, Window: time.Minute}
	if got, want := e.Error(), "throttle: rejected (p = 0.42: 120 requests, 35 accepts over 1m0s)"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	var err error = e
	if !errors.Is(err, throttle.ErrThrottled) || !errors.Is(err, callguard.ErrRejected) {
		t.Fatal("RejectedError does not match ErrThrottled and callguard.ErrRejected")
	}
	if errors.Is(err, errDown) || errors.Is(throttle.ErrThrottled, callguard.ErrRejected) {
		t.Fatal("RejectedError matches too much")
	}
}

// The rejection decisions follow p: n decisions at a fixed p reject
// n·p ± 4σ of them (σ = √(n·p·(1−p))).
func TestRejectionFrequency(t *testing.T) {
	const n = 10000
	for _, p := range []float64{0.1, 0.5, 0.9} {
		th := mustNew(t, throttle.Settings{MaxRejectionRate: p})
		finish(th, 100, errDown) // raw p ≈ 1: the cap holds it at p
		rejected := 0
		for range n {
			pm, err := th.Allow(context.Background())
			if err != nil {
				rejected++
				continue
			}
			pm.DoneNeutral()
		}
		wantRate(t, th, p)
		sigma := math.Sqrt(n * p * (1 - p))
		if d := math.Abs(float64(rejected) - n*p); d > 4*sigma {
			t.Errorf("p = %v: %d of %d rejected, want %v ± %.0f", p, rejected, n, n*p, 4*sigma)
		}
	}
}

// Concurrent calls: every request and accept is counted once (run with -race).
func TestConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := mustNew(t, throttle.Settings{})
		const workers, calls = 8, 2000
		var wg sync.WaitGroup
		var mu sync.Mutex
		admitted := 0
		for w := range workers {
			wg.Go(func() {
				mine := 0
				for i := range calls {
					err := th.Do(context.Background(), func(context.Context) error {
						if (i+w)%2 == 0 {
							return nil
						}
						return errDown
					})
					if err == nil {
						mine++
					}
					_ = th.RejectionRate()
				}
				mu.Lock()
				admitted += mine
				mu.Unlock()
			})
		}
		wg.Wait()
		wantCounts(t, th, workers*calls, admitted)
	})
}

func TestAllocs(t *testing.T) {
	th := mustNew(t, throttle.Settings{})
	ctx := context.Background()
	call := func(context.Context) error { return nil }
	if n := testing.AllocsPerRun(1000, func() {
		p, err := th.Allow(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p.Done(nil)
	}); n != 0 {
		t.Fatalf("Allow+Done: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = th.Do(ctx, call) }); n != 0 {
		t.Fatalf("Do: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		p, _ := th.Allow(ctx)
		p.Done(errDown)
		_ = th.RejectionRate()
	}); n != 0 {
		t.Fatalf("a refusal: %v allocations, want 0", n)
	}
}

// A call that outlives the window: its request has left with its bucket,
// so its accept (or its neutral end) touches nothing that came after.
func TestLongCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := mustNew(t, throttle.Settings{Window: 10 * time.Second})
		long, _ := th.Allow(context.Background())
		long2, _ := th.Allow(context.Background())
		wantCounts(t, th, 2, 0)
		time.Sleep(10 * time.Second) // the same bucket of the ring, one lap on
		finish(th, 3, errDown)
		long.Done(nil)
		long2.DoneNeutral()
		wantCounts(t, th, 3, 0)

		// Within the window, an accept lands in its request's bucket.
		p, _ := th.Allow(context.Background())
		time.Sleep(5 * time.Second)
		p.Done(nil)
		wantCounts(t, th, 4, 1)
		time.Sleep(5 * time.Second) // request and accept leave together
		wantCounts(t, th, 0, 0)
	})
}

// TestNotFailureAccepted: an answer marked breaker.NotFailure (a caller's
// error, as the adapters mark InvalidArgument or a 404) counts as
// accepted: 100 of them leave the rejection probability at 0.
func TestNotFailureAccepted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th, err := throttle.New(throttle.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			p, err := th.Allow(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			p.Done(breaker.NotFailure(errors.New("invalid argument")))
		}
		if req, acc := th.Counts(); req != 100 || acc != 100 || th.RejectionRate() != 0 {
			t.Errorf("Counts = %d, %d, p = %v; want 100 requests, 100 accepts, p = 0", req, acc, th.RejectionRate())
		}
	})
}
