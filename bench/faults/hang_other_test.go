//go:build !linux

package faults

import "errors"

// hangListener needs Linux's accept queue (see hang_linux_test.go).
func hangListener(string) (func(), error) {
	return nil, errors.New("faults: a listener that hangs needs Linux")
}
