package limit_test

import (
	"context"
	"testing"
	"time"

	"github.com/callguard/callguard/limit"
)

type acquireDone interface {
	Acquire(context.Context) (limit.Permit, error)
}

// benchAcquireDone runs Acquire+Done serially and in parallel; the limit
// is high enough that no call waits (the parallel variant may be
// rejected when GOMAXPROCS exceeds it: it counts the admissions).
func benchAcquireDone(b *testing.B, p acquireDone) {
	ctx := context.Background()
	serial := func(ctx context.Context) func(*testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				pm, err := p.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				pm.Done(nil)
			}
		}
	}
	b.Run("serial", serial(ctx))
	// A caller's deadline, as through the adapters: Gradient2 reads it on
	// each sample (DeadlineShare).
	dctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	b.Run("serial-deadline", serial(dctx))
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if pm, err := p.Acquire(ctx); err == nil {
					pm.Done(nil)
				}
			}
		})
	})
}

func BenchmarkBulkheadAcquireDone(b *testing.B) {
	bh, _ := limit.NewBulkhead(limit.BulkheadSettings{MaxConcurrent: 1024})
	benchAcquireDone(b, bh)
}

func BenchmarkLimiterAIMD(b *testing.B) {
	l, _ := limit.New(limit.Settings{Algorithm: limit.AIMD(limit.AIMDSettings{}), InitialLimit: 1024, MaxLimit: 1024})
	benchAcquireDone(b, l)
}

func BenchmarkLimiterGradient2(b *testing.B) {
	l, _ := limit.New(limit.Settings{InitialLimit: 1024, MaxLimit: 1024})
	benchAcquireDone(b, l)
}

// BenchmarkBulkheadQueued: every call waits for the slot the previous
// one releases (one slot, many goroutines): the queued path.
func BenchmarkBulkheadQueued(b *testing.B) {
	bh, _ := limit.NewBulkhead(limit.BulkheadSettings{MaxConcurrent: 1, MaxQueue: 1024})
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if pm, err := bh.Acquire(ctx); err == nil {
				pm.Done(nil)
			}
		}
	})
}
