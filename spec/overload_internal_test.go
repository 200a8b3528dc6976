package spec

import (
	"reflect"
	"testing"
	"time"

	"github.com/callguard/callguard/hedge"
)

// A hedge's settings, which no getter shows, reach hedge.New as the file
// says.
func TestOverloadArgs(t *testing.T) {
	s, err := Parse([]byte(`
chain:
  - hedge:
      delay: 30ms
      quantile: 0.9
      window: 20s
      minSamples: 50
      minDelay: 5ms
      maxDelay: 100ms
      maxHedges: 2
      budget: 0.1
      burst: 10
  - hedge: {delay: 20ms}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []hedge.Settings{{
		Delay: 30 * time.Millisecond, Quantile: 0.9, Window: 20 * time.Second, MinSamples: 50,
		MinDelay: 5 * time.Millisecond, MaxDelay: 100 * time.Millisecond, MaxHedges: 2, Budget: 0.1, Burst: 10,
	}, {
		Delay: 20 * time.Millisecond,
	}}
	for i, w := range want {
		if got := s.entries[i].hedge; got == nil || !reflect.DeepEqual(*got, w) {
			t.Errorf("chain[%d]: hedge arguments = %+v, want %+v", i, got, w)
		}
	}
}
