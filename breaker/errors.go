package breaker

import "errors"

// ErrOpen is returned for every call the breaker rejects. Every rejection
// matches errors.Is(err, ErrOpen), including [ErrTooManyProbes].
var ErrOpen = errors.New("breaker: open")

// ErrTooManyProbes is returned in half-open when the probe quota is used up.
// It is distinguishable from ErrOpen with ==, and errors.Is(err, ErrOpen)
// holds for it.
var ErrTooManyProbes error = probeQuotaError{}

type probeQuotaError struct{}

func (probeQuotaError) Error() string        { return "breaker: open (half-open probe quota used up)" }
func (probeQuotaError) Is(target error) bool { return target == ErrOpen }
