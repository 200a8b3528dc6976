// Package deadline answers, in one place, whether a context's deadline has
// passed: a downstream that was sent the deadline may report it before the
// context's own timer fires, so a context whose deadline is past counts as
// ended even while ctx.Err() is still nil.
package deadline

import (
	"context"
	"time"
)

// Passed reports whether ctx has a deadline that is not after now.
func Passed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// Ended reports whether ctx has ended, or its deadline has passed (see
// Passed). A nil ctx has not ended.
func Ended(ctx context.Context) bool {
	return ctx != nil && (ctx.Err() != nil || Passed(ctx))
}
