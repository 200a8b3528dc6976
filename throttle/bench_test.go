package throttle_test

import (
	"context"
	"testing"

	"github.com/callguard/callguard/throttle"
)

// BenchmarkAllowDone: admitting a call and recording its accept.
func BenchmarkAllowDone(b *testing.B) {
	th := mustNew(b, throttle.Settings{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, err := th.Allow(ctx)
		if err != nil {
			b.Fatal(err)
		}
		p.Done(nil)
	}
}

func BenchmarkAllowDoneParallel(b *testing.B) {
	th := mustNew(b, throttle.Settings{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			p, err := th.Allow(ctx)
			if err != nil {
				b.Fatal(err)
			}
			p.Done(nil)
		}
	})
}

// BenchmarkDo: the one-step form, with the throttle rejecting nothing.
func BenchmarkDo(b *testing.B) {
	th := mustNew(b, throttle.Settings{})
	ctx := context.Background()
	call := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		_ = th.Do(ctx, call)
	}
}

// BenchmarkRejecting: a throttle at its cap (0.9): 9 calls in 10 are
// rejected, each with a *RejectedError (one allocation).
func BenchmarkRejecting(b *testing.B) {
	th := mustNew(b, throttle.Settings{})
	finish(th, 100, errDown)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if p, err := th.Allow(ctx); err == nil {
			p.Done(errDown)
		}
	}
}

func BenchmarkRejectionRate(b *testing.B) {
	th := mustNew(b, throttle.Settings{})
	b.ReportAllocs()
	for b.Loop() {
		_ = th.RejectionRate()
	}
}
