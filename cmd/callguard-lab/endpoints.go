package main

import (
	"fmt"
	"time"

	"github.com/callguard/callguard/internal/scenario"
)

// oneBad is E1: one bad backend of ten behind one name, the recommended
// chain without and with the per-endpoint policy (grpcmw.Endpoints), over
// real gRPC servers on loopback. Its references are issue 34's goals.
func (l *lab) oneBad(string) error {
	scale := l.scale()
	warm, bad, healed := time.Second, time.Duration(float64(12*time.Second)*scale), 3*time.Second
	if !l.full {
		warm, healed = 500*time.Millisecond, 1500*time.Millisecond
	}
	arms := []scenario.OneBadArm{{}, {Endpoints: true}}
	if l.full {
		arms = append(arms, scenario.OneBadArm{Endpoints: true, Idempotent: true})
	}
	// Durations are the run's own (Scale 1): a quick run shortens the bad
	// time only.
	t := &Table{ID: "E1", Title: "one bad backend of ten", Proto: "grpc", Scale: 1,
		Setup: fmt.Sprintf("%d real gRPC servers on loopback behind one name (a resolver of the lab's own, round_robin), each answering in %v; 20 callers with 1 s deadlines, %v warm, then backend #0 bad for %v, then healed for %v. "+
			"Slow: ten times the healthy time. The chain is grpcmw.Standard (preset.Settings{}), alone (per-method breaker) and with grpcmw.Endpoints (a breaker per endpoint: 5 consecutive failures, open 0.5 s → 1 s, one probe, preferably a call that may be retried, at most 10 %% ejected).",
			scenario.Backends, scenario.HealthyTime, warm, bad, healed),
		Columns:   []string{"backend #0", "client", "calls", "succeeded", "refused", "p99 (healthy p99)", "#0's calls after its first second (fair share)", "ejected after", "readmitted after the heal"},
		Tolerance: "with Endpoints: at least 99.9 % of the calls succeed, p99 within the healthy p99 + 50 ms, #0 gets at most 5 % of its fair share after the fault's first second, ejected within 1 s, readmitted within 2 s of the heal, none refused; without it: measured only"}
	for _, fault := range []string{scenario.BackendFails, scenario.BackendHangs, scenario.BackendSlow} {
		for _, arm := range arms {
			r, err := scenario.OneBad(arm, fault, 20, warm, bad, healed)
			if err != nil {
				return err
			}
			rate := 100 * float64(r.OK) / float64(max(r.Calls, 1))
			at := func(d time.Duration) Cell {
				if d < 0 {
					return text("—")
				}
				return num(ms(d), "ms", none, "%.0f ms")
			}
			t.Rows = append(t.Rows, []Cell{text(fault), text(arm.String()), num(float64(r.Calls), "calls", none, "%.0f"),
				num(rate, "%", none, "%.3f %%"), num(float64(r.Refused), "calls", none, "%.0f"),
				text(fmt.Sprintf("%.1f ms (%.1f ms)", ms(r.P99), ms(r.HealthyP99))),
				text(fmt.Sprintf("%d (%.0f)", r.Bad, r.Fair)), at(r.Eject), at(r.Readmit)})
			if !arm.Endpoints {
				continue
			}
			what := fault + ", " + arm.String()
			t.between(what+": calls succeeded", rate, 99.9, 100, "%", false)
			t.between(what+": p99 over the healthy p99", ms(r.P99-r.HealthyP99), -1e9, 50, "ms", true)
			t.between(what+": #0's calls after the first second", float64(r.Bad), 0, 0.05*r.Fair, "calls", false)
			t.between(what+": refused", float64(r.Refused), 0, 0, "calls", false)
			t.expect(fmt.Sprintf("%s: ejected after %v, within 1 s", what, r.Eject.Round(time.Millisecond)), r.Eject >= 0 && r.Eject <= time.Second)
			t.expect(fmt.Sprintf("%s: readmitted %v after the heal, within 2 s", what, r.Readmit.Round(time.Millisecond)), r.Readmit >= 0 && r.Readmit <= 2*time.Second)
		}
	}
	t.Notes = append(t.Notes,
		"Without the per-endpoint policy #0 keeps its full share of the calls: a call that may be sent once and lands on it fails (or, slow, is cut at the adaptive timeout's floor); the per-method breaker cannot tell one bad backend from nine good ones.",
		"Calls that fail with the policy are those sent to #0 before its ejection (its first failures, and the calls picked while its first calls hung) and its probes; they are a fixed handful, so their share falls as the bad time grows (the full run's 12 s, as issue 34 measured).")
	l.add(t)
	return nil
}
