package grpcmw

import (
	"context"
	"time"

	"github.com/callguard/callguard"
	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/internal/adapter"
	att "github.com/callguard/callguard/internal/attempt"
	"github.com/callguard/callguard/internal/telemetry"
	"github.com/callguard/callguard/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// replyKey carries, under a chain with a fallback, the reply a fallback
// fills (see Reply).
type replyKey struct{}

// Reply returns the reply message of the unary call that ctx belongs to,
// for a fallback in the interceptor's chain to fill: a fallback that fills
// it and returns nil makes the call succeed with that reply. It returns nil
// outside such a call, and for streams, which a fallback cannot answer.
//
//	fb, _ := fallback.New(func(ctx context.Context, err error) error {
//		if r, ok := grpcmw.Reply(ctx).(*pb.Item); ok {
//			proto.Merge(r, cached)
//			return nil
//		}
//		return err
//	})
func Reply(ctx context.Context) any { return ctx.Value(replyKey{}) }

func (cfg *config) unary() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		p, key, err := cfg.chainFor(ctx, method, cc)
		if err != nil {
			return err
		}
		u := &unaryCall{cfg: cfg, p: p, callerCtx: ctx, method: method, req: req, reply: reply, cc: cc, invoker: invoker, opts: callOpts}
		idempotent, maxAttempts := cfg.callSettings(method, callOpts)
		u.maxAttempts = maxAttempts
		if idempotent {
			// Only a call that may be retried needs the trailer, for its
			// pushback, and (headerCommit) the header, which commits it.
			// Room for them, without touching the caller's slice.
			u.own = 1
			if cfg.headerCommit {
				u.own = 2
			}
			if len(callOpts)+int(u.own) <= len(u.buf) {
				u.opts = append(u.buf[:0], callOpts...)
			} else {
				u.opts = append(make([]grpc.CallOption, 0, len(callOpts)+int(u.own)), callOpts...)
			}
			if cfg.headerCommit {
				u.opts = append(u.opts, grpc.Header(&u.header))
			}
			u.opts = append(u.opts, grpc.Trailer(&u.trailer))
			u.idempotent = true
		}
		cctx := ctx
		if p.fallback {
			cctx = context.WithValue(ctx, replyKey{}, reply)
		}
		if p.hedge && !idempotent {
			cctx = adapter.NoHedge(cctx) // hedged like retried: idempotent methods only
		}
		if idempotent || p.ownReplies {
			if m, ok := reply.(proto.Message); ok {
				// Here, before any attempt writes to reply: for attempts
				// beside another (a hedge's, or a policy's of the user's own).
				u.replyType = m.ProtoReflect().Type()
			}
		}
		// The chain runs the call in u, which carries cctx: its attempts
		// find u there (unaryAttempt), with no closure to allocate.
		u.Context = cctx
		err = p.chain.Do(u, unaryAttempt)
		// The call's answer is decided: an attempt a policy left running
		// is dropped when it answers.
		attempts, _, _ := u.call.Close()
		err = u.settle(err)
		err = cfg.toStatus(ctx, err, u.answer)
		if err == nil && cfg.succeeded != nil {
			cfg.succeeded()
		}
		if cfg.tel != nil || cfg.tracing != nil {
			outcome := telemetry.Classify(ctx, err)
			cfg.tel.Call(key, method, 0, outcome, attempts)
			cfg.tracing.Ended(ctx, outcome, attempts, err)
		}
		return err
	}
}

// unaryCall is one intercepted unary call: one allocation for its state,
// its attempts' call options (up to three of the caller's; more take a
// slice of their own) and the trailer they fill in. Which attempt won, and
// whether another may still be sent, is its call's to decide
// (internal/attempt): the unaryCall carries attempts out.
type unaryCall struct {
	// Context is the context the chain runs the call in (the caller's,
	// with what the chain's policies need): u itself is that context, so
	// that each attempt finds its call by Value (see unaryAttempt).
	context.Context
	cfg         *config
	p           *prepared
	callerCtx   context.Context
	method      string
	req, reply  any
	cc          *grpc.ClientConn
	invoker     grpc.UnaryInvoker
	opts        []grpc.CallOption
	buf         [4]grpc.CallOption
	trailer     metadata.MD // the trailer of the attempt alone in flight
	header      metadata.MD // its header, with headerCommit (nil: none came)
	idempotent  bool
	own         int8 // the interceptor's own options, last in opts
	maxAttempts int
	replyType   protoreflect.MessageType // for the replies of attempts beside another (nil: not a proto.Message)
	call        att.Call

	// Guarded by call's lock (set in Commit and Do), read after call.Close.
	answer error     // the last attempt's own error: the downstream's last answer
	winner *hedgeOut // what the attempt that won filled, if not the caller's own
}

// unaryKey is the key under which a unaryCall is its own context's value.
type unaryKey struct{}

// Value is the call for unaryKey, the caller's context's values else.
func (u *unaryCall) Value(key any) any {
	switch key {
	case unaryKey{}:
		return u
	case att.Key{}:
		return &u.call
	}
	return u.Context.Value(key)
}

// unaryAttempt makes one attempt of the call whose context ctx descends
// from: a function, not a method value, which would allocate per call.
func unaryAttempt(ctx context.Context) error {
	return ctx.Value(unaryKey{}).(*unaryCall).attempt(ctx)
}

// attempt makes one attempt of the call. An attempt alone in flight fills
// the caller's reply and call options; one beside another (a hedge) fills
// a hedgeOut, which settle copies to the caller if it won. A method not
// declared idempotent never has two attempts in flight.
func (u *unaryCall) attempt(ctx context.Context) (err error) {
	// An attempt runs in u even where no policy made it a context of its
	// own: a load-balancing policy below (BalancerName) finds the call's
	// earlier attempts there.
	a, err := u.call.Begin(u.idempotent)
	if err != nil {
		return err // refused before sending
	}
	defer a.Finish()
	if tr := u.cfg.tracing; tr != nil {
		var end func(error)
		ctx, end = tr.Attempt(ctx, u.method, 0, a.N, a.Alone)
		defer func() { end(err) }()
	}
	reply, opts, trailer := u.reply, u.opts, &u.trailer
	var out *hedgeOut
	if a.Alone && (!u.p.ownReplies || u.replyType == nil) {
		u.trailer, u.header = nil, nil
	} else {
		if u.replyType == nil {
			return errNoHedge
		}
		out = &hedgeOut{reply: u.replyType.New().Interface()}
		trailer = &out.pushback
		reply, opts = out.reply, u.hedgeOptions(out)
	}
	if _, bounded := ctx.Deadline(); bounded && u.probe() {
		// Only a probe with a deadline waits: one without would hold its
		// slot for the whole outage.
		opts = u.probeOptions(opts)
	}
	var w *att.Wire
	if u.cfg.fromHeader {
		if dl, ok := ctx.Deadline(); ok {
			// The downstream's time is the wait for a connection to be
			// made, and from when the header goes out.
			w = new(att.Wire)
			w.Start(dl)
			ctx = context.WithValue(ctx, wireKey{}, w)
		}
	}
	err = u.invoker(ctx, u.method, u.req, reply, u.cc, opts...)
	if err == nil {
		if !a.Commit(func() { u.winner, u.answer = out, nil }) {
			return att.ErrLost // another attempt won: this reply is dropped
		}
	} else if !a.Do(func() { u.answer = err }) {
		// Another attempt has won: the caller does not get this failure,
		// the breakers inside still count it; nothing retries it.
		return retry.Permanent(u.cfg.outcome(u.callerCtx, u.cc, u.req, u.opts, err, *trailer, false))
	}
	// With headerCommit, an attempt alone whose response carried a header
	// is committed, as grpc-go commits a call once its header arrives.
	committed := out == nil && u.header != nil
	may := u.idempotent && !committed && (u.maxAttempts == 0 || a.N < u.maxAttempts)
	if may && err != nil && u.cfg.retryBuffer > 0 {
		// grpc-go's retry buffer (FromServiceConfig): a request larger,
		// framed, commits the call. Sized on the failure path only.
		if m, ok := u.req.(proto.Message); ok && 5+proto.Size(m) > u.cfg.retryBufferOf(u.callerOpts()) {
			may = false
		}
	}
	err = u.cfg.outcome(u.callerCtx, u.cc, u.req, u.opts, err, *trailer, may)
	if w != nil && err != nil {
		err = w.Judge(err, u.making(w))
	}
	return err
}

// making is the time an attempt, judged from its header (JudgeFromHeader)
// and ended without one, waited for a connection to be made: all its time,
// if it never got past grpc-go's pick (no DelayedPickComplete) while the
// channel is not READY (CONNECTING, or TRANSIENT_FAILURE for a call that
// waits for ready): grpc-go holds the call there until a transport is
// ready. On a READY channel, a call that has no header out waits for
// stream quota: the client's wait.
func (u *unaryCall) making(w *att.Wire) time.Duration {
	if bare, since := w.Bare(); bare && u.cc != nil && u.cc.GetState() != connectivity.Ready {
		return since
	}
	return 0
}

// probe reports an attempt made while a breaker of the chain is half-open
// (with ProbesWaitForReady): the breaker admitted it as a probe.
func (u *unaryCall) probe() bool { return halfOpen(u.p.breakers) }

// halfOpen reports a breaker among bs that is half-open (for unary calls,
// bs holds the chain's native breakers only, whose state reads without a
// lock).
func halfOpen(bs []*breaker.Breaker) bool {
	for _, b := range bs {
		if b.State() == breaker.StateHalfOpen {
			return true
		}
	}
	return false
}

// probeOptions returns the call options of a probe: the call's, and
// WaitForReady, after telling a connection in TRANSIENT_FAILURE to
// reconnect at once.
func (u *unaryCall) probeOptions(opts []grpc.CallOption) []grpc.CallOption {
	if u.cc != nil && u.cc.GetState() == connectivity.TransientFailure {
		u.cc.ResetConnectBackoff()
	}
	return append(opts[:len(opts):len(opts)], grpc.WaitForReady(true))
}

// errNoHedge refuses a concurrent attempt of a call whose reply is not a
// protocol buffer message: there is no second reply to fill. It is a
// local refusal (callguard.ErrRejected): the hedge sets it aside.
var errNoHedge = breaker.Neutral(retry.Permanent(noHedge{}))

type noHedge struct{}

func (noHedge) Error() string {
	return "grpcmw: a hedged attempt needs a reply of its own: the reply is not a proto.Message"
}
func (noHedge) Is(target error) bool { return target == callguard.ErrRejected }

// hedgeOut is what an attempt that runs beside another fills instead of
// the caller's own: its reply, and the header, trailer and peer the
// caller asked for with call options.
type hedgeOut struct {
	reply           any
	header, trailer metadata.MD
	pushback        metadata.MD // the trailer, for the interceptor's own reading
	peer            peer.Peer
}

// hedgeOptions returns the call options of an attempt beside another: the
// caller's, with the header, trailer and peer it asked for going to out
// instead, and trailer for the pushback. A hedged call is idempotent: the
// last of u.opts is the interceptor's own trailer option.
func (u *unaryCall) hedgeOptions(out *hedgeOut) []grpc.CallOption {
	callerOpts := u.callerOpts()
	opts := make([]grpc.CallOption, 0, len(callerOpts)+1)
	for _, o := range callerOpts {
		switch o.(type) {
		case grpc.HeaderCallOption:
			o = grpc.Header(&out.header)
		case grpc.TrailerCallOption:
			o = grpc.Trailer(&out.trailer)
		case grpc.PeerCallOption:
			o = grpc.Peer(&out.peer)
		}
		opts = append(opts, o)
	}
	return append(opts, grpc.Trailer(&out.pushback))
}

// callerOpts returns the caller's call options: u.opts without the
// interceptor's own header and trailer options, which an idempotent call
// has last.
func (u *unaryCall) callerOpts() []grpc.CallOption {
	return u.opts[:len(u.opts)-int(u.own)]
}

// settle gives the caller what the attempt that won received, once every
// attempt has returned: if it was one beside another, its reply, header,
// trailer and peer.
func (u *unaryCall) settle(err error) error {
	if err != nil || u.winner == nil {
		return err
	}
	w := u.winner
	m := u.reply.(proto.Message) // replyType is set only for a proto.Message
	proto.Reset(m)
	proto.Merge(m, w.reply.(proto.Message))
	for _, o := range u.callerOpts() {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = w.header
		case grpc.TrailerCallOption:
			*o.TrailerAddr = w.trailer
		case grpc.PeerCallOption:
			*o.PeerAddr = w.peer
		}
	}
	return nil
}
