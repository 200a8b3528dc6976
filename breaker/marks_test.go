package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/callguard/callguard/breaker"
)

var (
	errInvalidArgument = errors.New("invalid argument")
	engines            = []breaker.Engine{breaker.EngineNative, breaker.EngineGobreaker}
	always             = func(error) bool { return true }
	never              = func(error) bool { return false }
)

// returning is a call that returns err.
func returning(err error) func(context.Context) error {
	return func(context.Context) error { return err }
}

// TestNotFailureBeforeIsFailure: an error the adapters marked NotFailure
// (as they mark InvalidArgument) is a success even with an IsFailure that
// calls every error a failure: three of them never open a breaker that
// trips on 3.
func TestNotFailureBeforeIsFailure(t *testing.T) {
	for _, engine := range engines {
		b := mustNew(t, breaker.Settings{Engine: engine, ConsecutiveFailures: 3, IsFailure: always})
		for range 3 {
			_ = b.Do(context.Background(), returning(breaker.NotFailure(errInvalidArgument)))
		}
		if c := b.Counts(); b.State() != breaker.StateClosed || c.Successes != 3 || c.Failures != 0 {
			t.Errorf("engine %v: state %v, counts %+v; want closed, 3 successes", engine, b.State(), c)
		}
	}
}

// TestNeutralMarkNeverCounts: a Neutral-marked error counts neither as a
// failure nor as a success, whatever IsFailure says, also wrapped or
// joined: it does not break a run of failures either.
func TestNeutralMarkNeverCounts(t *testing.T) {
	for _, engine := range engines {
		b := mustNew(t, breaker.Settings{Engine: engine, ConsecutiveFailures: 3, IsFailure: always})
		_ = b.Do(context.Background(), fail)
		_ = b.Do(context.Background(), fail)
		for _, err := range []error{
			breaker.Neutral(errDown),
			fmt.Errorf("call: %w", breaker.Neutral(errDown)),
			errors.Join(breaker.Neutral(errDown), errExcluded),
			breaker.Neutral(breaker.Failure(errDown)), // the outermost mark decides
		} {
			_ = b.Do(context.Background(), returning(err))
		}
		if c := b.Counts(); b.State() != breaker.StateClosed || c.Neutral != 4 || c.ConsecutiveFailures != 2 {
			t.Fatalf("engine %v: state %v, counts %+v; want closed, 4 neutral, the run of 2 failures kept", engine, b.State(), c)
		}
		_ = b.Do(context.Background(), fail)
		if st := b.State(); st != breaker.StateOpen {
			t.Errorf("engine %v: state %v after the 3rd failure in a row, neutral calls between; want open", engine, st)
		}
	}
}

// TestFailureMarkCountsAfterCallerDone: a Failure-marked error is a
// failure even when the caller's context is done (canceled, or past its
// deadline), and whatever IsExcluded and IsFailure say.
func TestFailureMarkCountsAfterCallerDone(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, engine := range engines {
		for _, ctx := range []context.Context{canceled, expired} {
			b := mustNew(t, breaker.Settings{Engine: engine, ConsecutiveFailures: 3, IsExcluded: always, IsFailure: never})
			for range 3 {
				_ = b.Do(ctx, func(ctx context.Context) error { return breaker.Failure(ctx.Err()) })
			}
			if c := b.Counts(); b.State() != breaker.StateOpen || c.Failures != 3 {
				t.Errorf("engine %v, caller's context %v: state %v, counts %+v; want open, 3 failures", engine, ctx.Err(), b.State(), c)
			}
		}
	}
}

// question is a call of IsExcluded or IsFailure.
type question struct {
	fn  string
	err error
}

func (q question) String() string { return fmt.Sprintf("%s(%v)", q.fn, q.err) }

// TestIsExcludedAfterMarks: IsExcluded and IsFailure are asked only about
// unmarked errors whose caller is still waiting: a NotFailure-marked
// error is a success though IsExcluded says every error is excluded, and
// neither is asked about a marked error. The caller's own end comes before
// NotFailure (neutral, not a success), and before IsExcluded.
func TestIsExcludedAfterMarks(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, engine := range engines {
		var asked []question
		b := mustNew(t, breaker.Settings{
			Engine:              engine,
			ConsecutiveFailures: 100,
			IsExcluded:          func(err error) bool { asked = append(asked, question{"IsExcluded", err}); return true },
			IsFailure:           func(err error) bool { asked = append(asked, question{"IsFailure", err}); return true },
		})
		steps := []struct {
			ctx  context.Context
			err  error
			want breaker.Counts
		}{
			{context.Background(), breaker.NotFailure(errInvalidArgument), breaker.Counts{Successes: 1}},
			{context.Background(), breaker.Neutral(errDown), breaker.Counts{Neutral: 1}},
			{context.Background(), breaker.Failure(errDown), breaker.Counts{Failures: 1}},
			{context.Background(), breaker.Failure(breaker.NotFailure(errDown)), breaker.Counts{Failures: 1}},
			{canceled, breaker.NotFailure(errInvalidArgument), breaker.Counts{Neutral: 1}},
			{canceled, errDown, breaker.Counts{Neutral: 1}},
			{context.Background(), errExcluded, breaker.Counts{Neutral: 1}},
		}
		for i, st := range steps {
			before := b.Counts()
			_ = b.Do(st.ctx, returning(st.err))
			after := b.Counts()
			got := breaker.Counts{
				Successes: after.Successes - before.Successes,
				Failures:  after.Failures - before.Failures,
				Neutral:   after.Neutral - before.Neutral,
			}
			if got != st.want {
				t.Errorf("engine %v, step %d (%v): counted %+v, want %+v", engine, i, st.err, got, st.want)
			}
		}
		if want := (question{"IsExcluded", errExcluded}); len(asked) != 1 || asked[0] != want {
			t.Errorf("engine %v: asked %v, want only %v: the unmarked error of a waiting caller", engine, asked, want)
		}
	}
}
