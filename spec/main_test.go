package spec_test

import (
	"testing"

	"go.uber.org/goleak"
)

// No test leaves a goroutine behind: Parse starts none, nor do the
// policies it builds.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
