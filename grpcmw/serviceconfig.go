package grpcmw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/internal/bridge"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpc-go caps a retry policy's maxAttempts at 5, silently.
const serviceConfigMaxAttempts = 5

// grpc-go's retry buffer: a call that has sent more, its messages framed,
// is committed (grpc.MaxRetryRPCBufferSize's default).
const grpcRetryBuffer = 256 << 10

// retryBufferOf is the retry buffer of a call with opts: cfg's, or a
// grpc.MaxRetryRPCBufferSize among them (the last).
func (cfg *config) retryBufferOf(opts []grpc.CallOption) int {
	n := cfg.retryBuffer
	for _, o := range opts {
		if o, ok := o.(grpc.MaxRetryRPCBufferSizeCallOption); ok {
			n = o.MaxRetryRPCBufferSize
		}
	}
	return n
}

// FromServiceConfig returns interceptors that do what a gRPC service
// config's retry settings ask of grpc-go's own retry, as callguard
// chains, linted: for each methodConfig, the methods it names get a chain
// of its timeout (the call's, over all its attempts; a stream's whole
// life, as grpc-go's, not only its creation) and its retryPolicy
// (maxAttempts, capped at 5 as grpc-go does; initialBackoff, maxBackoff,
// backoffMultiplier; retryableStatusCodes), and retryThrottling
// (maxTokens, tokenRatio) is one retry.Throttle for every method, as
// grpc-go keeps one per ClientConn: use the interceptors for one
// connection. As grpc-go's, it is charged by the retryable failures of
// the methods with a retryPolicy and credited by every call through the
// interceptors that succeeds, whatever its method (a stream at its clean
// end). A name with a method matches that method, one with only a
// service every method of it, an empty name every method; the most
// specific wins, as in grpc-go. A method no methodConfig names is passed
// through. The methods a retryPolicy names are retried whether or not
// they are declared Idempotent: a service config's retryPolicy is the
// service's own word that they may be.
//
// The waits are grpc-go's: before retry n, min(initialBackoff ×
// backoffMultiplier^(n-1), maxBackoff), ± 20 % (also with an
// initialBackoff above maxBackoff and a multiplier below 1). A server's
// grpc-retry-pushback-ms replaces the wait, however long, as in grpc-go;
// a trailer with several values is not retried. An attempt whose
// response carried a header (a unary call's or a stream's) is not
// retried: grpc-go commits a call once its header arrives (gRFC A6).
// Nor is a call that sent more than grpc-go's retry buffer, 256 KiB
// (grpc.MaxRetryRPCBufferSize), its messages framed: a stream's replay
// buffer is that, and 1024 messages, unless a StreamBuffer among opts
// says otherwise. What differs: after a pushback, grpc-go starts its schedule again from
// initialBackoff, the chain's retry goes on where it was; a wait that
// would outlive the call's deadline ends the call at once with
// DeadlineExceeded, where grpc-go waits for the deadline; a retryable
// ResourceExhausted without a pushback is not retried (an
// overloaded server, a quota or a size limit would refuse it again; see
// [DefaultClassify]); a code not listed as retryable is classified as
// [DefaultClassify] says, for the breakers and metrics of the chain.
// A hedgingPolicy is an error, naming the methodConfig: grpc-go does not
// implement hedging and ignores the field, so a config that counts on it
// is hedged by neither, and saying so beats a silent no. So is any field
// of a retryPolicy grpc-go would refuse. Other settings (loadBalancingConfig,
// waitForReady, …) are not the chain's: give the service config to
// grpc-go as before (grpc.WithDefaultServiceConfig), since
// Interceptors.DialOptions disables grpc-go's retry so that the two do
// not multiply.
//
// opts are the interceptors' own options (Metrics, Logger, Client, …),
// applied after; a PerMethod, PerTarget or PerKey among them is an error,
// since the service config decides the chain of each method.
func FromServiceConfig(serviceConfig string, opts ...Option) (*Interceptors, error) {
	sc, err := parseServiceConfig(serviceConfig)
	if err != nil {
		return nil, fmt.Errorf("grpcmw: FromServiceConfig: %w", err)
	}
	var th *retry.Throttle
	var credit func()
	if t := sc.RetryThrottling; t != nil {
		if th, err = retry.NewThrottle(t.MaxTokens, t.TokenRatio); err != nil {
			return nil, fmt.Errorf("grpcmw: FromServiceConfig: retryThrottling: %w", err)
		}
		credit = bridge.ThrottleOwn(th)
	}
	chains := map[string]*chain.Chain{} // by name key: "service/method", "service/", ""
	retryable := map[codes.Code]bool{}
	for i, mc := range sc.MethodConfig {
		c, err := mc.chain(th, retryable, nil)
		if err != nil {
			return nil, fmt.Errorf("grpcmw: FromServiceConfig: methodConfig[%d]: %w", i, err)
		}
		for j, n := range mc.Name {
			if n.Service == "" && n.Method != "" {
				return nil, fmt.Errorf("grpcmw: FromServiceConfig: methodConfig[%d].name[%d]: a method (%q) without a service", i, j, n.Method)
			}
			k := n.Service + "/" + n.Method
			if n.Service == "" {
				k = ""
			}
			if _, dup := chains[k]; dup {
				return nil, fmt.Errorf("grpcmw: FromServiceConfig: methodConfig[%d].name[%d]: %q is named twice", i, j, "/"+k)
			}
			chains[k] = c
		}
	}
	pass, err := chain.New()
	if err != nil {
		return nil, err
	}
	keyOf := func(_ context.Context, method string, _ *grpc.ClientConn) string {
		service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
		for _, k := range [...]string{service + "/" + name, service + "/", ""} {
			if _, ok := chains[k]; ok {
				return k
			}
		}
		return "\x00none"
	}
	build := func(k string) (*chain.Chain, error) {
		if c, ok := chains[k]; ok {
			return c, nil
		}
		return pass, nil
	}
	opts = append([]Option{
		optionFunc(func(c *config) {
			// grpc-go's retry buffer (256 KiB, its default), for streams
			// too: a StreamBuffer among opts replaces it.
			c.retryBuffer = grpcRetryBuffer
			c.bufMsgs, c.bufBytes = maxReplayMsgs, grpcRetryBuffer
		}),
		AllIdempotent(),
		Classify(func(c codes.Code) Class {
			if retryable[c] {
				return ClassRetryableFailure
			}
			return DefaultClassify(c)
		}),
	}, opts...)
	opts = append(opts, optionFunc(func(c *config) {
		if c.perKey != nil {
			c.Fail("%s: the service config decides each method's chain", c.perKey.Name)
			return
		}
		perKey("FromServiceConfig", keyOf, build, len(chains)+1).apply(c)
		c.deadlineCode = true
		c.headerCommit = true
		c.streamDeadline = true
		if th != nil {
			// grpc-go credits the connection's throttle with every
			// successful RPC, whatever the method.
			c.succeeded = credit
		}
	}))
	return NewInterceptors(nil, opts...)
}

// ServiceConfigChain is the chain [FromServiceConfig] gives the methods
// one methodConfig names, for a program (the lab's --service-config)
// that runs it outside the interceptors.
type ServiceConfigChain struct {
	// Names are the methodConfig's names: "/service/method", "/service/"
	// (every method of the service) or "" (every method).
	Names []string
	// New builds the chain afresh: new policies, and a retry.Throttle of
	// its own when the service config has retryThrottling; src, if not
	// nil, is the source of its retry's jitter (retry.Rand), for a run
	// that must be replayed.
	New func(src rand.Source) (*chain.Chain, error)
	// Retryable reports the codes of the retryPolicy's
	// retryableStatusCodes: the chain's retry retries a status error with
	// one of them, and nothing else.
	Retryable func(codes.Code) bool
}

// ServiceConfigChains returns the chains FromServiceConfig builds, one
// per methodConfig, in the service config's order, with its errors.
func ServiceConfigChains(serviceConfig string) ([]ServiceConfigChain, error) {
	sc, err := parseServiceConfig(serviceConfig)
	if err != nil {
		return nil, fmt.Errorf("grpcmw: ServiceConfigChains: %w", err)
	}
	newThrottle := func() (*retry.Throttle, error) { return nil, nil }
	if t := sc.RetryThrottling; t != nil {
		if _, err := retry.NewThrottle(t.MaxTokens, t.TokenRatio); err != nil {
			return nil, fmt.Errorf("grpcmw: ServiceConfigChains: retryThrottling: %w", err)
		}
		newThrottle = func() (*retry.Throttle, error) { return retry.NewThrottle(t.MaxTokens, t.TokenRatio) }
	}
	var out []ServiceConfigChain
	for i, mc := range sc.MethodConfig {
		retryable := map[codes.Code]bool{}
		if _, err := mc.chain(nil, retryable, nil); err != nil {
			return nil, fmt.Errorf("grpcmw: ServiceConfigChains: methodConfig[%d]: %w", i, err)
		}
		var names []string
		for _, n := range mc.Name {
			switch {
			case n.Service == "":
				names = append(names, "")
			default:
				names = append(names, "/"+n.Service+"/"+n.Method)
			}
		}
		out = append(out, ServiceConfigChain{
			Names: names,
			New: func(src rand.Source) (*chain.Chain, error) {
				th, err := newThrottle()
				if err != nil {
					return nil, err
				}
				return mc.chain(th, map[codes.Code]bool{}, src)
			},
			Retryable: func(c codes.Code) bool { return retryable[c] },
		})
	}
	return out, nil
}

type serviceConfigJSON struct {
	MethodConfig    []methodConfigJSON `json:"methodConfig"`
	RetryThrottling *struct {
		MaxTokens  float64 `json:"maxTokens"`
		TokenRatio float64 `json:"tokenRatio"`
	} `json:"retryThrottling"`
}

type methodConfigJSON struct {
	Name []struct {
		Service string `json:"service"`
		Method  string `json:"method"`
	} `json:"name"`
	Timeout       *string          `json:"timeout"`
	RetryPolicy   *retryPolicyJSON `json:"retryPolicy"`
	HedgingPolicy json.RawMessage  `json:"hedgingPolicy"`
}

type retryPolicyJSON struct {
	MaxAttempts          int          `json:"maxAttempts"`
	InitialBackoff       string       `json:"initialBackoff"`
	MaxBackoff           string       `json:"maxBackoff"`
	BackoffMultiplier    float64      `json:"backoffMultiplier"`
	RetryableStatusCodes []codes.Code `json:"retryableStatusCodes"`
}

// parseServiceConfig decodes the service config's JSON, the fields it
// does not know left to grpc-go.
func parseServiceConfig(js string) (*serviceConfigJSON, error) {
	var sc serviceConfigJSON
	d := json.NewDecoder(bytes.NewReader([]byte(js)))
	if err := d.Decode(&sc); err != nil {
		return nil, fmt.Errorf("not a service config: %w", err)
	}
	return &sc, nil
}

// chain is a methodConfig's chain: its timeout, then its retry; codes it
// retries are added to retryable.
func (mc *methodConfigJSON) chain(th *retry.Throttle, retryable map[codes.Code]bool, src rand.Source) (*chain.Chain, error) {
	if len(mc.HedgingPolicy) > 0 && !bytes.Equal(mc.HedgingPolicy, []byte("null")) {
		return nil, errors.New("hedgingPolicy: not converted: grpc-go ignores it (it implements no hedging); drop it, or hedge with package hedge in a chain of your own (grpcmw.NewInterceptors)")
	}
	var ps []chain.Policy
	if mc.Timeout != nil {
		d, err := protoDuration(*mc.Timeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("timeout %q: want a positive duration in seconds, as \"1.5s\"", *mc.Timeout)
		}
		t, err := timeout.New(d)
		if err != nil {
			return nil, fmt.Errorf("timeout: %w", err)
		}
		ps = append(ps, t)
	}
	if rp := mc.RetryPolicy; rp != nil {
		r, err := rp.policy(th, src)
		if err != nil {
			return nil, fmt.Errorf("retryPolicy: %w", err)
		}
		for _, c := range rp.RetryableStatusCodes {
			retryable[c] = true
		}
		ps = append(ps, r)
	}
	return chain.New(ps...)
}

// policy is the retry grpc-go would run, with grpc-go's checks.
func (rp *retryPolicyJSON) policy(th *retry.Throttle, src rand.Source) (*retry.Policy, error) {
	initial, err := protoDuration(rp.InitialBackoff)
	if err != nil || initial <= 0 {
		return nil, fmt.Errorf("initialBackoff %q: want a positive duration in seconds, as \"0.1s\"", rp.InitialBackoff)
	}
	maxB, err := protoDuration(rp.MaxBackoff)
	if err != nil || maxB <= 0 {
		return nil, fmt.Errorf("maxBackoff %q: want a positive duration in seconds, as \"1s\"", rp.MaxBackoff)
	}
	switch {
	case rp.MaxAttempts <= 1:
		return nil, fmt.Errorf("maxAttempts %d: must be greater than 1", rp.MaxAttempts)
	case !(rp.BackoffMultiplier > 0):
		return nil, fmt.Errorf("backoffMultiplier %v: must be greater than 0", rp.BackoffMultiplier)
	case len(rp.RetryableStatusCodes) == 0:
		return nil, errors.New("retryableStatusCodes: must name at least one code")
	}
	for _, c := range rp.RetryableStatusCodes {
		if c == codes.OK {
			return nil, errors.New("retryableStatusCodes: OK is not a failure")
		}
	}
	// grpc-go's wait before retry n is min(initialBackoff ×
	// backoffMultiplier^(n-1), maxBackoff), ± 20 % (its stream.go): the
	// retry's own schedule, which keeps an initialBackoff above
	// maxBackoff with a multiplier below 1 (the product shrinks to below
	// maxBackoff later), and default jitter. With a multiplier of 1 or
	// more, every wait of such a schedule is maxBackoff.
	if rp.BackoffMultiplier >= 1 {
		initial = min(initial, maxB)
	}
	set := map[codes.Code]bool{}
	for _, c := range rp.RetryableStatusCodes {
		set[c] = true
	}
	opts := []retry.Option{
		retry.MaxAttempts(min(rp.MaxAttempts, serviceConfigMaxAttempts)),
		retry.ExponentialBy(initial, maxB, rp.BackoffMultiplier),
		retry.Jitter(0.2),
		retry.RetryIf(func(err error) bool { return set[status.Code(err)] }),
		// grpc-go waits a pushback of any length; the caller's deadline
		// ends it.
		retry.MaxPushback(math.MaxInt64),
	}
	if th != nil {
		opts = append(opts, retry.WithThrottle(th))
	}
	if src != nil {
		opts = append(opts, retry.Rand(src))
	}
	return retry.New(opts...)
}

// protoDuration parses a google.protobuf.Duration's JSON form: seconds
// with up to 9 decimal places and an "s".
func protoDuration(s string) (time.Duration, error) {
	num, ok := strings.CutSuffix(s, "s")
	if !ok || num == "" {
		return 0, fmt.Errorf("%q: no seconds", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, err
	}
	return time.Duration(f * float64(time.Second)), nil
}
