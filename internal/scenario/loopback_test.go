package scenario

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestLoopback checks the real network of a live run: a real HTTP server
// in front of the simulated downstream, its success a success, its queue
// full an ErrOverloaded, another failure a 503, and the caller giving up
// reaching the server.
func TestLoopback(t *testing.T) {
	var n atomic.Int32
	gaveUp := make(chan struct{})
	call, stop, err := Loopback(func(ctx context.Context) error {
		switch n.Add(1) {
		case 1:
			return nil
		case 2:
			return errors.New("down")
		case 3:
			return ErrOverloaded
		default:
			<-ctx.Done()
			close(gaveUp)
			return ctx.Err()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := call(context.Background()); err != nil {
		t.Errorf("healthy call: %v", err)
	}
	if err := call(context.Background()); err == nil || errors.Is(err, ErrOverloaded) || !strings.Contains(err.Error(), "503") {
		t.Errorf("failed call: %v, want a 503", err)
	}
	if err := call(context.Background()); !errors.Is(err, ErrOverloaded) || !strings.Contains(err.Error(), "429") {
		t.Errorf("refused call: %v, want ErrOverloaded from a 429", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := call(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("call past its deadline: %v, want context.DeadlineExceeded", err)
	}
	select {
	case <-gaveUp:
	case <-time.After(5 * time.Second):
		t.Error("the server never saw the caller give up")
	}
}
