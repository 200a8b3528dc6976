package keyed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/internal/adapter"
	"github.com/callguard/callguard/internal/bridge"
)

func TestBoundedLRU(t *testing.T) {
	built := 0
	k, err := New[*chain.Chain](func(key string) (*chain.Chain, error) { built++; return chain.New() }, 2, Options[*chain.Chain]{})
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
	if _, err := New[*chain.Chain](nil, 1, Options[*chain.Chain]{}); err == nil {
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
			}, 4, Options[*chain.Chain]{})
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

// source returns a Source of per-key chains of one breaker each (one
// failure opens it for a second), keeping at most max keys, and the
// chains it built by key.
func source(t *testing.T, max int, evicted *[]string) (Source[*chain.Chain], map[string]int) {
	t.Helper()
	builds := map[string]int{}
	var mu sync.Mutex
	s, err := NewSource("test", nil, &PerKeyOption{
		Name: "PerKey",
		Build: func(key string) (*chain.Chain, error) {
			mu.Lock()
			builds[key]++
			mu.Unlock()
			b, err := breaker.New(breaker.Settings{Name: key, ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenProbes: 1})
			if err != nil {
				return nil, err
			}
			return chain.New(b)
		},
		MaxKeys: max,
		OnEvict: func(key string) { *evicted = append(*evicted, key) },
	}, func(_ string, c *chain.Chain) (*chain.Chain, error) { return c, nil })
	if err != nil {
		t.Fatal(err)
	}
	return s, builds
}

var errDown = errors.New("down")

func fail(context.Context) error { return errDown }
func ok(context.Context) error   { return nil }

// TestOpenKeysKept: a key whose breaker is open is never evicted, however
// many new keys come (it was rebuilt closed, and the outage forgotten); a
// closed one is, least recently used first, and its eviction is told and
// counted. Once the breaker closes again, the key is evictable again.
func TestOpenKeysKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var evicted []string
		s, builds := source(t, 3, &evicted)
		down, _ := s.Get("down")
		_ = down.Do(context.Background(), fail) // open
		for i := range 100 {
			c, err := s.Get(fmt.Sprint(i))
			if err != nil {
				t.Fatal(err)
			}
			_ = c.Do(context.Background(), ok)
		}
		if again, _ := s.Get("down"); again != down || builds["down"] != 1 {
			t.Fatalf("the open key was rebuilt (%d builds)", builds["down"])
		}
		st := s.Stats()
		if st.Kept != 3 || st.Evicted != 98 || len(evicted) != 98 || evicted[0] != "0" || st.Overflowed != 0 {
			t.Errorf("stats %+v, %d evictions told (first %q); want 3 kept, 98 evicted from \"0\" on", st, len(evicted), evicted[0])
		}
		// The open stay ends; a success closes it: now it may go.
		time.Sleep(2 * time.Second)
		_ = down.Do(context.Background(), ok)
		for i := range 3 {
			_, _ = s.Get(fmt.Sprint("new", i))
		}
		if last := evicted[len(evicted)-3:]; !slices.Equal(last, []string{"98", "99", "down"}) {
			t.Errorf("evicted %v at the end; want 98, 99, then the closed \"down\"", last)
		}
	})
}

// TestOverflow: when every kept key is open, a new key is not kept: it
// runs through one overflow chain, built once and shared, whose breaker
// trips on the failures of all such keys (more failing keys than the bound
// used to rebuild a closed chain per call, and never trip).
func TestOverflow(t *testing.T) {
	var evicted []string
	s, builds := source(t, 2, &evicted)
	for _, k := range []string{"a", "b"} {
		c, _ := s.Get(k)
		_ = c.Do(context.Background(), fail)
	}
	calls := 0
	for i := range 50 {
		c, err := s.Get(fmt.Sprint("failing", i))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Do(context.Background(), func(context.Context) error { calls++; return errDown })
	}
	st := s.Stats()
	if calls != 1 || builds[Overflow] != 1 || st.Kept != 2 || st.Overflowed != 50 || st.Evicted != 0 || len(evicted) != 0 {
		t.Errorf("%d downstream calls, %d overflow builds, stats %+v; want 1 call (the overflow breaker open after it), 1 build, 2 kept, 50 overflowed", calls, builds[Overflow], st)
	}
	var keys []string
	s.Each(func(key string, _ *chain.Chain) { keys = append(keys, key) })
	if want := []string{Overflow, "a", "b"}; !slices.Equal(keys, want) {
		t.Errorf("Each: %v, want %v", keys, want)
	}
}

// TestStaleKeysGo: a key whose breaker is open but that nobody has asked
// for in longer than its stale time (a minute, at least twice its open
// stay) is evictable: a client that stops asking for keys after a failure
// (junk host names) cannot hold the set's slots forever. Before that, new
// keys overflow, and a scan that finds no room is not repeated for 10 ms.
func TestStaleKeysGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var evicted []string
		s, builds := source(t, 2, &evicted)
		for _, k := range []string{"junk1", "junk2"} {
			c, _ := s.Get(k)
			_ = c.Do(context.Background(), fail)
		}
		_, _ = s.Get("new1")
		if st := s.Stats(); st.Overflowed != 1 || st.Evicted != 0 {
			t.Fatalf("with both keys open: %+v, want new1 overflowed", st)
		}
		time.Sleep(time.Minute)
		c, _ := s.Get("new2")
		_ = c.Do(context.Background(), ok)
		if st := s.Stats(); st.Evicted != 1 || st.Kept != 2 || builds["new2"] != 1 || len(evicted) != 1 || evicted[0] != "junk1" {
			t.Errorf("after a minute unused: %+v, evicted %v, new2 built %d times; want junk1 evicted, new2 kept", st, evicted, builds["new2"])
		}
	})
}

// TestEvictionRetiresBreakers: the breakers of an evicted chain are told
// to bridge.BreakerRetired (package shared ends their sharing), once,
// before OnEvict; a kept chain's are not.
func TestEvictionRetiresBreakers(t *testing.T) {
	var retired []any
	var evicted []string
	old := bridge.BreakerRetired
	defer func() { bridge.BreakerRetired = old }()
	bridge.BreakerRetired = func(b any) {
		if len(retired) != len(evicted) {
			t.Error("retired after OnEvict")
		}
		retired = append(retired, b)
	}
	s, _ := source(t, 2, &evicted)
	a, _ := s.Get("a")
	_, _ = s.Get("b")
	_, _ = s.Get("c") // evicts a
	if len(retired) != 1 || len(evicted) != 1 || evicted[0] != "a" {
		t.Fatalf("retired %d breakers, evicted %v; want a's one breaker", len(retired), evicted)
	}
	if bs := adapter.Breakers(a); len(bs) != 1 || retired[0] != any(bs[0]) {
		t.Errorf("retired %v, want a's breaker %v", retired[0], bs)
	}
}
