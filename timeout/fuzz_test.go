package timeout_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/timeout"
)

// FuzzOptions: New never panics on any timeout, latency points and
// adaptive options. It returns an error that names what is invalid, or a
// policy whose timeout stays within its adaptive bounds while it learns
// from answers of any latency, and whose Do ends a hung call at its
// timeout.
func FuzzOptions(f *testing.F) {
	f.Add(int64(300*time.Millisecond), 0.99, int64(200*time.Millisecond), 0.5, int64(50*time.Millisecond), true, 0.99, 1.5, int64(0), int64(time.Second), int64(5*time.Second), 10, []byte{1, 2, 3})
	f.Add(int64(1), 1.0, int64(1), 1.0, int64(1), false, 0.0, 0.0, int64(0), int64(0), int64(0), 0, []byte{})
	f.Add(int64(1<<62), 0.5, int64(1<<62), 0.5, int64(1<<62), true, 1.0, 1e300, int64(1<<62), int64(1<<63-1), int64(6), 1<<62, []byte{255, 0})
	f.Add(int64(-1), -0.1, int64(-1), 2.0, int64(0), true, -1.0, 0.5, int64(-1), int64(-2), int64(5), -1, []byte{7})
	f.Fuzz(func(t *testing.T, d int64, q1 float64, l1 int64, q2 float64, l2 int64, adaptive bool, quantile, mult float64, lo, hi, window int64, minSamples int, answers []byte) {
		opts := []timeout.Option{timeout.Latency(q1, time.Duration(l1)), timeout.Latency(q2, time.Duration(l2))}
		if adaptive {
			opts = append(opts, timeout.Adaptive(timeout.AdaptiveOptions{Quantile: quantile, Multiplier: mult,
				Min: time.Duration(lo), Max: time.Duration(hi), Window: time.Duration(window), MinSamples: minSamples}))
		}
		p, err := timeout.New(time.Duration(d), opts...)
		if err != nil {
			if p != nil || !strings.HasPrefix(err.Error(), "timeout: ") {
				t.Fatalf("New: %v, %v; want an error naming what is invalid", p, err)
			}
			return
		}
		x := bridge.TimeoutOf(p)
		in := func() bool { return !x.Adaptive || p.Timeout() >= x.Min && p.Timeout() <= x.Max }
		if p.Timeout() <= 0 || !in() {
			t.Fatalf("%v: timeout %v outside [%v, %v]", p, p.Timeout(), x.Min, x.Max)
		}
		if len(answers) > 300 {
			answers = answers[:300]
		}
		synctest.Test(t, func(t *testing.T) {
			for _, a := range answers {
				latency := time.Duration(a) * time.Duration(a) * time.Millisecond
				_ = p.Do(context.Background(), func(ctx context.Context) error {
					select {
					case <-time.After(latency):
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				})
				if !in() {
					t.Fatalf("%v: timeout %v outside [%v, %v]", p, p.Timeout(), x.Min, x.Max)
				}
			}
			if p.Timeout() > time.Hour {
				return // a hung call would run that long, even in virtual time it is pointless
			}
			want := p.Timeout()
			start := time.Now()
			err := p.Do(context.Background(), func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
			if !timeout.Expired(err) || time.Since(start) != want {
				t.Fatalf("%v: a hung call ended after %v with %v; want %v and a timeout", p, time.Since(start), err, want)
			}
		})
	})
}
