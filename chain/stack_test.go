package chain_test

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
)

//go:noinline
func stackPointer() uintptr {
	var here byte
	return uintptr(unsafe.Pointer(&here))
}

//go:noinline
func growStack(n int) byte {
	var big [16 << 10]byte
	big[n] = 1
	return big[n/2]
}

// TestStackPerCall: what the recommended chain (retry → breaker → attempt
// timeout) takes of a goroutine's stack between Do's caller and the call.
// It was 3,296 bytes when the chain ran in one recursive function with
// every kind of step's locals in its frame; 1,080 with a function per kind
// (go1.26, amd64). Ten thousand calls in flight each pay it: one that pushes
// a goroutine past a stack size doubles that goroutine's stack. The bound
// leaves room for other compilers and architectures, and catches a return
// to the old shape.
func TestStackPerCall(t *testing.T) {
	c := must(chain.New(
		must(retry.New(retry.MaxAttempts(3))),
		must(breaker.New(breaker.Settings{})),
		must(timeout.New(time.Second, timeout.Latency(0.99, 100*time.Millisecond))),
	))
	used := make(chan uintptr)
	go func() {
		growStack(100) // the stack grown beforehand: no copy moves it during the call
		top := stackPointer()
		var at uintptr
		_ = c.Do(context.Background(), func(context.Context) error { at = stackPointer(); return nil })
		used <- top - at
	}()
	got := <-used
	t.Logf("retry → breaker → timeout: %d bytes of stack between Do's caller and the call", got)
	if got > 2000 { // 1,568 under the race detector
		t.Errorf("%d bytes of stack, want at most 2000", got)
	}
}
