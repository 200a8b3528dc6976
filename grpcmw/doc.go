// Package grpcmw runs gRPC client calls through a callguard chain: a unary
// and a stream client interceptor.
//
//	c, _ := chain.New(retryPolicy, breaker, attemptTimeout) // the canonical order
//	conn, _ := grpc.NewClient(target, append(grpcmw.DialOptions(c,
//		grpcmw.Idempotent("/pkg.Service/Get")), creds)...)
//
// Build c in the canonical order, overall timeout → retry → breaker →
// per-attempt timeout (see package chain); the lint checks it.
//
// # What is a failure
//
// Status codes are classified (see [DefaultClassify]): Unavailable,
// ResourceExhausted and DeadlineExceeded are failures worth retrying;
// Internal, Unknown, DataLoss and Aborted are failures not retried; caller
// errors (InvalidArgument, NotFound, AlreadyExists, PermissionDenied,
// Unauthenticated, FailedPrecondition, OutOfRange, Unimplemented, Canceled)
// never trip a breaker and are never retried. The caller's own cancellation
// is neutral. [Classify] overrides the table.
//
// # What is retried
//
// Only idempotent methods: none by default; name them with [Idempotent], or
// declare all with [AllIdempotent], or mark one call with
// [WithIdempotency]. A server's grpc-retry-pushback-ms trailer replaces the
// backoff wait (negative: do not retry). [WithMaxAttempts] lowers the
// attempts of one call.
//
// grpc-go's own retry (from a service config) runs beneath all
// interceptors, so its attempts multiply the chain's: [DialOptions] adds
// grpc.WithDisableRetry. Use it, or disable one of the two yourself.
//
// # Errors
//
// A breaker rejection is a status error with codes.Unavailable for which
// errors.Is(err, breaker.ErrOpen) holds; a chain timeout is
// codes.DeadlineExceeded matching timeout.ErrTimeout; otherwise the caller
// gets the last attempt's own status error.
//
// # Streams
//
// The breakers admit each attempt at a stream and learn its final outcome
// (io.EOF is a success). The soonest timeout of the chain, or what is left
// of an overall one, bounds each attempt's creation and then the wait for
// its first response message once the client has closed its send side (so
// an upload, or a bidi call still sending, is not cut short); not the
// stream's life. A timeout outside a breaker is neutral to it, as for unary
// calls.
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
// neutral to the breakers, whether or not the caller calls RecvMsg again;
// for unary calls too, ClientConn.Close and size limits are neutral.
// Fallbacks and opaque policies do not apply to streams.
package grpcmw
