// Package grpcmw runs gRPC client calls through a callguard chain: a unary
// and a stream client interceptor that share one configuration.
//
//	c, _ := chain.New(retryPolicy, breaker, attemptTimeout) // the canonical order
//	ic, err := grpcmw.NewInterceptors(c, grpcmw.Idempotent(pb.Catalog_GetItem_FullMethodName))
//	if err != nil {
//		return err // an invalid option, by name
//	}
//	conn, _ := grpc.NewClient(target, append(ic.DialOptions(), creds)...)
//
// Build c in the canonical order, overall timeout → retry → breaker →
// per-attempt timeout (see package chain); the lint checks it.
// [NewInterceptors] checks c and every option once, and returns the first
// error, by name; no call ever fails for a bad option. Its unary and stream
// interceptors ([Interceptors.Unary], [Interceptors.Stream], or both with
// [Interceptors.DialOptions]) share their chains: with [PerMethod],
// [PerTarget] or [PerKey], one breaker per key sees unary calls and streams
// alike.
//
// # What is a failure
//
// Status codes are classified (see [DefaultClassify]): Unavailable,
// ResourceExhausted and DeadlineExceeded are failures worth retrying
// (ResourceExhausted only when the server says when, with
// grpc-retry-pushback-ms); Internal, Unknown, DataLoss and Aborted are
// failures not retried; caller errors (InvalidArgument, NotFound,
// AlreadyExists, PermissionDenied, Unauthenticated, FailedPrecondition,
// OutOfRange, Unimplemented, Canceled) never trip a breaker and are never
// retried. The caller's own cancellation is neutral; an attempt its
// deadline ended counts as a failure if it had already run longer than a
// healthy answer takes (see package chain), so impatient callers do not
// blind the breaker. What the client causes itself — ClientConn.Close, a
// request over the call's send size limit, one that does not marshal — is
// neutral and not retried. No decision depends on an error's text.
// [Classify] overrides the table.
//
// # What is retried
//
// Only idempotent methods: none by default; name them with [Idempotent]
// ("/package.Service/Method", as in the generated *_FullMethodName
// constants), or declare all with [AllIdempotent], or mark one call with
// [WithIdempotency]. A server's grpc-retry-pushback-ms trailer replaces the
// backoff wait (negative, or several values: do not retry, as in grpc-go).
// [WithMaxAttempts] lowers the attempts of one call. Before a wait, the
// retry asks the breakers whether the next attempt could be admitted when
// it ends, and gives up at once if not.
//
// Attempts of a unary call may run at once only for an idempotent method
// (under a hedge, or a policy of your own): an attempt alone in flight
// fills the caller's reply and Header, Trailer and Peer options, one
// beside another fills its own, copied to the caller if it wins. The first
// success is the answer: an attempt that would start after it is refused
// before it is sent, one that answers after it is dropped. A method not
// declared idempotent is never sent twice at once, whatever policy runs
// it. docs/attempts.md states the invariants.
//
// grpc-go's own retry (from a service config) runs beneath all
// interceptors, so its attempts multiply the chain's:
// [Interceptors.DialOptions] adds grpc.WithDisableRetry.
//
// # Errors
//
// A call rejected by a breaker before any attempt is a status error with
// codes.Unavailable for which errors.Is(err, breaker.ErrOpen) holds; when a
// breaker ends the retries after an attempt, the caller gets that
// attempt's own status, and errors.Is(err, breaker.ErrOpen) holds too. A
// chain timeout is codes.DeadlineExceeded matching timeout.ErrTimeout;
// otherwise the caller gets the last attempt's own status error.
//
// # Fallbacks
//
// A fallback in the chain answers a unary call by filling its reply,
// which [Reply] gives it. Streams cannot be answered so: a chain with a
// fallback is refused for streams ([UnaryOnly] accepts it for unary
// calls only).
//
// # Streams
//
// A stream applies the chain's retry, its breakers (nested chains
// included), its timeouts, and its throttles, limiters and bulkheads; a
// chain with anything else (a fallback, a hedge: a stream's messages
// cannot be sent twice at once) is refused for streams, naming the policy.
// The breakers admit each attempt at a stream and learn its final outcome
// (io.EOF is a success); the throttles, limiters and bulkheads are asked
// first, for each attempt wherever they stand in the chain, and a limiter's
// or bulkhead's queue wait (up to its MaxWait) happens while the stream
// starts its attempt, before it is handed to the caller. The chain's timeouts
// bound each attempt's creation, not the wait for its first message:
// [FirstMessageTimeout] bounds that, as a failure inside every breaker.
//
// A stream is retried only before its first response message, once the
// client has closed its send side (server-streaming calls always have), and
// only while the proto messages it sent fit a bounded replay buffer
// ([StreamBuffer]: at most 1024 messages and 64 KiB, so that a replay never
// blocks on flow control). A send that meets the end of the stream returns
// io.EOF, as from grpc-go, and ends the retries: its caller stops sending,
// and a replay would be truncated. Context commits the stream, as in
// grpc-go: it is not retried afterwards.
//
// The caller's own cancellation, ClientConn.Close and a send that fails on
// the client's side (such as a message over grpc.MaxCallSendMsgSize) are
// neutral to the breakers, whether or not the caller calls RecvMsg again.
//
// # Per endpoint
//
// Below the chain, the load-balancing policy [BalancerName] keeps a breaker
// per backend of a channel (package endpoint): [NewEndpointHealth] and the
// option [Endpoints] put it on the interceptors' channels, and a retry or a
// hedge of a unary call goes to a backend its earlier attempts did not try.
// See docs/endpoints.md.
package grpcmw
