package callguard

import "errors"

// ErrRejected is matched, with errors.Is, by every error with which an
// overload policy refuses a call locally, without calling the downstream:
// the adaptive throttle (package throttle), the adaptive concurrency limit
// and the bulkhead (package limit). Each returns a typed error of its own
// with the numbers behind the refusal, which also matches its package's
// sentinel.
//
// A local rejection is not a downstream failure: a breaker does not count
// it (unless it is marked breaker.Failure), a retry gives up on it at once
// (another attempt would be refused the same way), and the adapters map it
// to codes.ResourceExhausted for gRPC (the call was not sent; the caller
// may try again later); for HTTP, it is RoundTrip's error when no attempt
// was sent, as a breaker's rejection is (a 503 answer marked
// httpmw.RejectedHeader with httpmw.RejectionResponses; a retry refused
// after an attempt gives the caller that attempt's response). A breaker's own
// rejection, breaker.ErrOpen, is a decision about the downstream's health
// and does not match ErrRejected.
var ErrRejected = errors.New("callguard: rejected")
