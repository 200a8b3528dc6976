package keyed

import (
	"fmt"
	"testing"

	"github.com/callguard/callguard/chain"
)

func TestBoundedLRU(t *testing.T) {
	built := 0
	k, err := New(func(key string) (*chain.Chain, error) { built++; return chain.New() }, 2)
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
	if _, err := New(nil, 1); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}
