package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/internal/deadline"
	"github.com/callguard/callguard/internal/scenario"
	"github.com/callguard/callguard/retry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// whatIfServiceConfig is --service-config FILE: the chain a gRPC service
// config's methodConfig converts to (grpcmw.FromServiceConfig), for
// method (or the methodConfig every method falls to, else the first),
// through the what-if's scenarios beside the recommended chain.
func (l *lab) whatIfServiceConfig(file, method, only string, rate float64, callers int, live bool) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	cs, err := grpcmw.ServiceConfigChains(string(data))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	i, which, err := pickMethodConfig(cs, method)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	picked := cs[i]
	sub := subject{
		name: fmt.Sprintf("%s's methodConfig[%d] (%s)", file, i, which),
		policies: func() ([]chain.Policy, error) {
			c, err := picked.New(rand.NewPCG(whatIfSeed, 0))
			if err != nil {
				return nil, err
			}
			return c.Policies(), nil
		},
		ordered: true, // the conversion's: timeout (the call's) → retry
		wrap: func(c *chain.Chain) scenario.Stack {
			return scenario.StackFunc(func(ctx context.Context, call func(context.Context) error) error {
				return c.Do(ctx, func(ctx context.Context) error { return asGRPC(ctx, call(ctx)) })
			})
		},
	}
	fmt.Fprintf(l.out, "The service config's chain runs as grpcmw.FromServiceConfig builds it; the model's answers reach it as gRPC statuses: an overload refusal RESOURCE_EXHAUSTED (not retried without a pushback, as through the interceptors), any other failure UNAVAILABLE, which its retry retries only if retryableStatusCodes lists it.\n\n")
	return l.whatIfOf(sub, only, rate, callers, live)
}

// pickMethodConfig is the methodConfig a call to method falls to, as in
// grpc-go (the exact name, then the service, then the default); without a
// method, the default, else the first.
func pickMethodConfig(cs []grpcmw.ServiceConfigChain, method string) (int, string, error) {
	if len(cs) == 0 {
		return 0, "", errors.New("no methodConfig")
	}
	find := func(name string) int {
		for i, c := range cs {
			for _, n := range c.Names {
				if n == name {
					return i
				}
			}
		}
		return -1
	}
	if method == "" {
		if i := find(""); i >= 0 {
			return i, "every method", nil
		}
		return 0, "its first names: " + strings.Join(cs[0].Names, ", "), nil
	}
	service, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	for _, k := range []string{method, "/" + service + "/", ""} {
		if i := find(k); i >= 0 {
			return i, "for " + method, nil
		}
	}
	return 0, "", fmt.Errorf("--method %s: no methodConfig names it, its service or every method", method)
}

// asGRPC tells a scenario answer as a gRPC status, errors.Is still
// finding the model's own error.
func asGRPC(ctx context.Context, err error) error {
	switch {
	case err == nil, deadline.Ended(ctx):
		return err
	case errors.Is(err, scenario.ErrOverloaded):
		return retry.Permanent(grpcError{status.New(codes.ResourceExhausted, err.Error()), err})
	}
	return grpcError{status.New(codes.Unavailable, err.Error()), err}
}

type grpcError struct {
	st  *status.Status
	err error
}

func (e grpcError) Error() string              { return e.st.Err().Error() }
func (e grpcError) GRPCStatus() *status.Status { return e.st }
func (e grpcError) Unwrap() error              { return e.err }
