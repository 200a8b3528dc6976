package spec

import (
	"reflect"
	"testing"
	"time"

	"github.com/callguard/callguard/timeout"
)

// What no getter shows reaches the constructors as the file says: the
// adaptive timeout's Quantile, Window and MinSamples (timeout.Adaptive takes
// the options as one value), and the retry's jitter and maxPushback.
func TestTimeoutArgs(t *testing.T) {
	s, err := Parse([]byte(`
chain:
  - timeout:
      timeout: 400ms
      latency: [{q: 0.5, latency: 80ms}]
      adaptive: {quantile: 0.95, multiplier: 2, window: 30s, max: 2s, min: 40ms, minSamples: 50}
  - retry: {jitter: 0.3, maxPushback: 2s, constant: 10ms}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := timeoutArgs{
		d:       400 * time.Millisecond,
		latency: []quantile{{Q: 0.5, Latency: 80 * time.Millisecond}},
		adaptive: &timeout.AdaptiveOptions{
			Quantile: 0.95, Multiplier: 2, Window: 30 * time.Second,
			Max: 2 * time.Second, Min: 40 * time.Millisecond, MinSamples: 50,
		},
	}
	if got := s.entries[0].timeout; got == nil || !reflect.DeepEqual(*got, want) {
		t.Errorf("timeout arguments = %+v, want %+v", got, want)
	}
	wantRetry := retryArgs{
		schedule: "constant", initial: 10 * time.Millisecond, max: 10 * time.Millisecond,
		jitter: 0.3, hasJitter: true, maxPushback: 2 * time.Second, hasMaxPushback: true,
	}
	if got := s.entries[1].retry; got == nil || *got != wantRetry {
		t.Errorf("retry arguments = %+v, want %+v", got, wantRetry)
	}
	if opts, err := s.entries[1].retry.options(); err != nil || len(opts) != 3 {
		t.Errorf("%d retry options (%v), want 3: constant, jitter, maxPushback", len(opts), err)
	}
}
