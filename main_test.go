package callguard_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every root test ends with no goroutine left: the simulated servers' work
// is waited for, and no policy starts a goroutine of its own.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
