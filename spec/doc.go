// Package spec reads a chain of policies from a file, in YAML or JSON, so
// that a service's production chain and the lab's runs
// (callguard-lab --chain chain.yaml) come from one description, as
// resilience4j and Polly users configure theirs from a file.
//
//	s, err := spec.Load("chain.yaml")
//	if err != nil {
//		return err // e.g. spec: chain.yaml:7: chain[1].breaker.openTimeout: "5 secs" is not a duration (…)
//	}
//	c, err := s.Chain() // new policies on each call: no breaker is shared
//
// [Load] and [Parse] check every value, build the policies and lint the
// chain once, so that a bad file fails there, with its line and field,
// and never at the first call. A [Spec] holds the constructors' arguments,
// not policies: each [Spec.Chain] builds new ones.
//
// # The format
//
// One YAML document; JSON, a subset of YAML 1.2, is read by the same
// parser (go.yaml.in/yaml/v3) and gives the same errors. Field names are
// those below, exactly; an unknown field, at any depth, is an error.
//
//	lint:                          # optional: chain.Options
//	  strict: false                # true: every warning is an error (Parse fails)
//	  ignore: [CG013]              # finding codes left out (see chain.Rules)
//	  maxDetection: 10s            # rule CG004's bound (0: 10s)
//	  downstreamRecovery: 20s      # for rule CG012 (0: unknown)
//	  callerDeadline: 1s           # the deadline your callers give a request, for rule CG004 (0: unknown)
//	chain:                         # the policies, outermost first; at least one
//	  - timeout: 3500ms            # a fixed timeout (here an overall one)
//	  - retry: {attempts: 3, exponential: {initial: 100ms, max: 1s}}
//	  - breaker: {consecutiveFailures: 10, failureRate: 0.5, openTimeout: 1s, halfOpenSuccesses: 2}
//	  - timeout: {timeout: 300ms, adaptive: {quantile: 0.99, window: 5s, max: 1s}}
//
// The same chain in JSON:
//
//	{"chain": [
//	  {"timeout": "3500ms"},
//	  {"retry": {"attempts": 3, "exponential": {"initial": "100ms", "max": "1s"}}},
//	  …
//	]}
//
// Values: a duration is a Go duration string ("300ms", "1.5s", "1m30s";
// [time.ParseDuration]), never negative; a bare number is not a duration,
// but for 0. Counts are whole numbers, rates and fractions numbers (0.5); flags are
// true or false; names are strings. The canonical order is overall timeout
// → retry → (throttle → hedge → limit or bulkhead →) breaker → per-attempt
// timeout → call; the lint says what another order will do.
//
// Each entry of chain is exactly one policy: a mapping with one of the keys
// timeout, retry, breaker, throttle, hedge, limit or bulkhead. A fallback
// cannot be in a file: its answer is code. Build that chain from the
// file's policies instead:
//
//	ps, err := s.Policies()
//	…
//	c, err := s.Options().New(append([]chain.Policy{fallbackPolicy}, ps...)...)
//
// A field the file leaves out takes the Go API's default, as does 0 where
// the Go API says 0 means the default; the exceptions: what a Go
// constructor takes as an argument must be given (a timeout's duration,
// exponential's initial and max, a budget's ratio and perSecond, a latency
// quantile's q and latency, a hedge's delay, a bulkhead's maxConcurrent),
// and a breaker's trip rule must be given.
//
// # Timeouts
//
// A timeout ([timeout.New]) is a duration, timeout: 300ms, or a mapping:
//
//	timeout: 300ms                 # required: New's timeout, the starting value of an adaptive one
//	latency:                       # timeout.Latency, any number of points
//	  - {q: 0.99, latency: 200ms}  # a fraction q of calls take at most latency (both required)
//	adaptive:                      # timeout.Adaptive with timeout.AdaptiveOptions
//	  quantile: 0.99               # Quantile (0: 0.999)
//	  multiplier: 1.5              # Multiplier (0: 1.5)
//	  min: 30ms                    # Min (0: the timeout / 10)
//	  max: 1s                      # Max (0: the timeout × 10)
//	  window: 5s                   # Window (0: 60s)
//	  minSamples: 100              # MinSamples (0: 100)
//
// adaptive: {} gives an adaptive timeout with every default.
//
// # Retries
//
// A retry ([retry.New]) is a mapping:
//
//	attempts: 3                    # retry.MaxAttempts, counting the first call (default 3)
//	exponential: {initial: 100ms, max: 1s}  # retry.Exponential (the default: 100ms to 5s)
//	constant: 200ms                # or retry.Constant; not both
//	jitter: 0.2                    # retry.Jitter, within [0, 1] (default 0.2; 0: exact waits)
//	maxPushback: 30s               # retry.MaxPushback (default 30s)
//	retryWhenOpen: false           # true: retry.RetryWhenOpen
//	fitDeadline: false             # true: retry.FitDeadline
//	retryRejected: false           # true: retry.RetryRejected
//	budget: {ratio: 0.1, perSecond: 1}  # retry.WithBudget(retry.NewBudget(ratio, perSecond))
//
// retry: {} is a retry with every default. Each chain gets a budget of its
// own. What needs code (retry.RetryIf, retry.OnRetry) cannot be in a file.
//
// # Breakers
//
// A breaker ([breaker.New]) is a mapping of the fields of [breaker.Settings]
// but the func-typed ones (IsFailure, IsExcluded, OnStateChange), named
// alike:
//
//	name: payments                 # Name
//	consecutiveFailures: 10        # ConsecutiveFailures: a trip rule
//	consecutiveFor: 500ms          # ConsecutiveFor: how long that run must last
//	failureRate: 0.5               # FailureRate: a trip rule
//	slowCallRate: 0.8              # SlowCallRate: a trip rule, with slowCall
//	slowCall: 2s                   # SlowCall
//	window: 10s                    # Window (0: 10s with a rate rule)
//	windowCalls: 50                # WindowCalls: a window of the last N calls instead
//	minCalls: 20                   # MinCalls (0: 20, or windowCalls)
//	openTimeout: 1s                # OpenTimeout (0: 10s)
//	maxOpenTimeout: 30s            # MaxOpenTimeout (0: the stay does not grow)
//	halfOpenProbes: 3              # HalfOpenProbes (0: 3)
//	halfOpenSuccesses: 2           # HalfOpenSuccesses (0: halfOpenProbes)
//	skipHalfOpen: false            # SkipHalfOpen
//	engine: native                 # Engine: native or gobreaker
//
// At least one trip rule (consecutiveFailures, failureRate, slowCallRate)
// must be given and above 0. In Go, Settings with no trip rule get 10
// consecutive failures or 50 % over 10 s; a file must say which rules it
// wants, so a breaker without one is an error.
//
// # Overload policies
//
// A throttle ([throttle.New]), a hedge ([hedge.New]), a limit ([limit.New])
// and a bulkhead ([limit.NewBulkhead]) are mappings of the fields of their
// Settings but the func-typed ones, named alike. A throttle's IsAccepted
// and a limit's IsDrop need code: a file's throttle and limit take the
// default rules ([limit.IsDrop]).
//
//	throttle:                      # throttle.Settings; throttle: {} has every default
//	  k: 2                         # K, >= 1 (0: 2)
//	  window: 1m                   # Window (0: 1m)
//	  maxRejectionRate: 0.9        # MaxRejectionRate, within [0, 1] (0: 0.9)
//	  minRequests: 20              # MinRequests (0: 20)
//	hedge:                         # hedge.Settings
//	  delay: 20ms                  # Delay: required (with quantile, until minSamples)
//	  quantile: 0.95               # Quantile, within [0, 1) (0: a fixed delay)
//	  window: 1m                   # Window (0: 1m)
//	  minSamples: 100              # MinSamples (0: 100)
//	  minDelay: 2ms                # MinDelay (0: delay / 10)
//	  maxDelay: 200ms              # MaxDelay (0: delay × 10)
//	  maxHedges: 1                 # MaxHedges, within [1, 16] (0: 1)
//	  budget: 0.05                 # Budget, hedges per call (0: 0.05)
//	  burst: 30                    # Burst (0: 30)
//	limit:                         # limit.Settings; limit: {} has every default
//	  algorithm: gradient2         # gradient2 (limit.Gradient2, the default) or aimd (limit.AIMD)
//	  initialLimit: 20             # InitialLimit (0: 20)
//	  minLimit: 1                  # MinLimit (0: 1)
//	  maxLimit: 200                # MaxLimit (0: 200)
//	  maxQueue: 10                 # MaxQueue (0: no queue)
//	  maxWait: 50ms                # MaxWait, with maxQueue (0: no bound but the caller's context)
//	  smoothing: 0.2               # gradient2's Gradient2Settings: Smoothing (0: 0.2)
//	  queueSize: 4                 # QueueSize (0: 4)
//	  tolerance: 1.5               # Tolerance (0: 1.5)
//	  longWindow: 600              # LongWindow (0: 600)
//	  shortWindow: 10              # ShortWindow (0: 10)
//	  deadlineShare: 0.5           # DeadlineShare, of the callers' time left (0: 0.5; < 0: never)
//	  backoffRatio: 0.9            # aimd's AIMDSettings: BackoffRatio (0: 0.9)
//	bulkhead:                      # limit.BulkheadSettings
//	  maxConcurrent: 10            # MaxConcurrent: required, >= 1
//	  maxQueue: 20                 # MaxQueue (0: no queue)
//	  maxWait: 50ms                # MaxWait, with maxQueue (0: no bound but the caller's context)
//
// A limit given the other algorithm's settings is an error. A chain with
// them in their places (a hedge beside a retry wants its budget, CG023):
//
//	chain:
//	  - retry: {attempts: 3, budget: {ratio: 0.1, perSecond: 10}}
//	  - throttle: {}
//	  - hedge: {delay: 20ms, quantile: 0.95}
//	  - limit: {maxLimit: 100, maxQueue: 10, maxWait: 50ms}   # or a bulkhead
//	  - breaker: {consecutiveFailures: 5, openTimeout: 1s}
//	  - timeout: 300ms
//
// # Errors
//
// Parse's errors, and Load's but for reading the file, are [*Error] values
// naming the line and the field path, with entries counted from 0, e.g.
//
//	spec: line 7: chain[2].breaker.openTimeout: "5 secs" is not a duration (Go syntax: 300ms, 1.5s, 2m)
//
// Every error of a file is reported, not only the first: one is returned
// as an [*Error]; several as one error that reads a line each, in the
// file's order, and whose Unwrap() []error returns them, each an [*Error]
// (errors.As finds the first). A value at fault stops only the checks
// that depend on it: the settings of one policy together are checked, and
// the chain built and linted, once every value is right. A misspelt field
// or policy gets the nearest known name: (did you mean "breaker"?).
//
// A value that a policy's constructor rejects gets the constructor's error,
// wrapped: errors.As finds a [*breaker.SettingsError],
// [*throttle.SettingsError] or [*limit.SettingsError] in it (hedge.New's
// errors name the field in their text). Anchors and
// aliases (&name, *name) may repeat a value; merge keys (<<) are not
// supported, and a file holds one document.
package spec
