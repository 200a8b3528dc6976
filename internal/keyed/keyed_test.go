package keyed

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/callguard/callguard/chain"
)

func TestBoundedLRU(t *testing.T) {
	built := 0
	k, err := New[*chain.Chain](func(key string) (*chain.Chain, error) { built++; return chain.New() }, 2)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := k.Get("a")
	b, _ := k.Get("b")
	if a2, _ := k.Get("a"); a2 != a || built != 2 {
		t.Fatalf("a rebuilt: %d builds", built)
	}
	_, _ = k.Get("c") // evicts b, the least recently used
	if k.Len() != 2 {
		t.Fatalf("Len() = %d, want 2", k.Len())
	}
	if b2, _ := k.Get("b"); b2 == b || built != 4 {
		t.Fatalf("b kept after eviction (%d builds)", built)
	}
	for i := range 1000 {
		_, _ = k.Get(fmt.Sprint(i))
	}
	if k.Len() != 2 {
		t.Fatalf("Len() = %d after 1000 keys, want 2", k.Len())
	}
	if _, err := New[*chain.Chain](nil, 1); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

// TestConcurrentFirstUse: callers that ask for a new key at once wait for
// one build and share its chain; a failed or panicking build is not kept,
// and its waiters get its error.
func TestConcurrentFirstUse(t *testing.T) {
	for _, key := range []string{"a", "bad", "panic"} {
		synctest.Test(t, func(t *testing.T) {
			var builds atomic.Int32
			release := make(chan struct{})
			k, err := New[*chain.Chain](func(key string) (*chain.Chain, error) {
				builds.Add(1)
				<-release
				switch key {
				case "bad":
					return nil, errors.New("no chain")
				case "panic":
					panic("boom")
				}
				return chain.New()
			}, 4)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			var chains []*chain.Chain
			errs := 0
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { _ = recover() }() // the builder's own panic
					c, err := k.Get(key)
					mu.Lock()
					defer mu.Unlock()
					chains = append(chains, c)
					if err != nil {
						errs++
					}
				}()
			}
			synctest.Wait() // one builder waits for release, the others for it
			close(release)
			wg.Wait()
			if builds.Load() != 1 {
				t.Errorf("%s: %d builds for 16 concurrent first uses, want 1", key, builds.Load())
			}
			for _, c := range chains {
				if c != chains[0] {
					t.Errorf("%s: callers got different chains", key)
				}
			}
			if want := key != "a"; (errs > 0) != want || (want && errs < len(chains)) {
				t.Errorf("%s: %d errors for %d results", key, errs, len(chains))
			}
		})
	}
}
