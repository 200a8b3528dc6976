package endpoints

import (
	"cmp"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/callguard/callguard/internal/scenario"
)

// text is the case's report: what the fault was, the noise, a row per
// arm, and the goal's verdicts.
func (r *caseResult) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s.\n", r.c.name(), r.c.about())
	fmt.Fprintf(&b, "Warm-up %v, bad %v, healed %v. Scheduling noise in the bad phase: %s. Noise in the warm-up: %s.\n\n",
		r.windows[phaseWarm].Round(10*time.Millisecond), r.windows[phaseBad].Round(10*time.Millisecond),
		r.windows[phaseHealed].Round(10*time.Millisecond), noiseText(r.run.noise[phaseBad]), noiseText(r.run.noise[phaseWarm]))
	if len(r.run.skipped) > 0 {
		fmt.Fprintf(&b, "Not run (the per-endpoint policy is not in this tree): %s.\n\n", strings.Join(r.run.skipped, ", "))
	}
	if r.c.all {
		b.WriteString("| arm | all: ok / started | bad: ok / started | refused (breaker / limit) | breaker opens (warm-up / bad / healed) | first opening after the fault | most ejected at once (changes / Statuses) | openings the cap kept | healed: ok / started |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, a := range r.arms {
			bad, healed := a.ph[phaseBad], a.ph[phaseHealed]
			most := "–"
			if a.policy {
				most = fmt.Sprintf("%d / %d", a.most, a.polled)
			}
			fmt.Fprintf(&b, "| %s | %d / %d | %d / %d | %d / %d | %d / %d / %d | %s | %s | %d | %d / %d |\n",
				a.name, a.overall.ok, a.overall.started, bad.ok, bad.started, bad.open, bad.rejected,
				a.opens[phaseWarm], a.opens[phaseBad], a.opens[phaseHealed], when(a.firstOpen), most, a.capped, healed.ok, healed.started)
		}
	} else {
		b.WriteString("| arm | all: ok / started | bad: ok / started | bad: ok p50 / p99 | warm-up p99 | #0 received in the bad phase | #0 after its first second / fair share | refused (breaker / limit) | healthy backends ejected (warm-up / bad / healed) | #0 paused from (servers) | #0 ejected (policy) | #0 back after the heal (servers) | #0 readmitted (policy) | breaker opens (warm-up / bad / healed) |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, a := range r.arms {
			bad := a.ph[phaseBad]
			ej, re, he := "–", "–", "–"
			if a.policy {
				ej, re = when(a.ejected), when(a.readmitted)
				he = fmt.Sprintf("%d / %d / %d", a.healthyEjected[phaseWarm], a.healthyEjected[phaseBad], a.healthyEjected[phaseHealed])
			}
			fmt.Fprintf(&b, "| %s | %d / %d (%s) | %d / %d (%s) | %s / %s | %s | %d | %d / %.0f (%.1f %%) | %d / %d | %s | %s | %s | %s | %s | %d / %d / %d |\n",
				a.name, a.overall.ok, a.overall.started, pct(a.overall), bad.ok, bad.started, pct(bad), ms(bad.p50), ms(bad.p99), ms(a.ph[phaseWarm].p99),
				a.bad0, a.to0, float64(a.toAll)/backends, 100*a.share, bad.open, bad.rejected, he, when(a.quiet), ej, when(a.back), re,
				a.opens[phaseWarm], a.opens[phaseBad], a.opens[phaseHealed])
		}
	}
	b.WriteString("\n")
	for i, a := range r.arms {
		if e := errorsText(r.run.errs[i]); e != "" {
			fmt.Fprintf(&b, "- %s's failed calls of the bad phase: %s\n", a.name, e)
		}
		if h := r.healthyEjectionsText(i); h != "" {
			fmt.Fprintf(&b, "- %s ejected healthy backends: %s\n", a.name, h)
		}
	}
	for _, a := range r.arms {
		for _, v := range r.goal(&a) {
			mark := "meets the goal"
			switch {
			case !v.tolerated && raceOn && !v.structural:
				mark = "FAILS (reported, not held under the race detector)"
			case !v.tolerated:
				mark = "FAILS"
			case !v.held:
				mark = "misses the goal (within the test's allowance)"
			}
			fmt.Fprintf(&b, "- %s, %s — %s: %s\n", a.name, v.what, mark, v.detail)
		}
	}
	return b.String()
}

// healthyEjectionsText lists arm i's ejections of healthy backends: which
// backend, in which phase, when.
func (r *caseResult) healthyEjectionsText(i int) string {
	run := r.run
	if r.c.all {
		return "" // every backend was bad
	}
	var parts []string
	for _, ch := range run.changes[i] {
		if !ch.Ejected || ch.Capped || is0(ch.Endpoint, run.addr0[i]) {
			continue
		}
		at := ch.at.Sub(run.clock)
		ph := run.phaseAt(at)
		from := [phases]time.Duration{0, run.bad, run.heal}[ph]
		parts = append(parts, fmt.Sprintf("%s, %s + %s", ch.Endpoint, phaseNames[ph], ms(at-from)))
	}
	return strings.Join(parts, "; ")
}

// errorsText lists the three commonest errors of errs, with their
// counts.
func errorsText(errs map[string]int) string {
	keys := slices.Collect(maps.Keys(errs))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(errs[b]-errs[a], strings.Compare(a, b)) })
	var parts []string
	for i, k := range keys {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d other kinds", len(keys)-3))
			break
		}
		parts = append(parts, fmt.Sprintf("%d × `%s`", errs[k], k))
	}
	return strings.Join(parts, "; ")
}

// pct is a phase's success rate in percent, to the hundredth.
func pct(p phaseStats) string {
	if p.started == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f %%", 100*p.rate())
}

func noiseText(n scenario.Noise) string {
	return fmt.Sprintf("a 1 ms timer late by p50 %s, p99 %s, max %s (%d wake-ups)", ms(n.P50), ms(n.P99), ms(n.Max), n.Samples)
}

// failures are the goal's verdicts that did not hold with the test's
// allowance, each with its numbers; under the race detector, only the
// structural ones (the others are in the report).
func (r *caseResult) failures() []string {
	var out []string
	for _, a := range r.arms {
		for _, v := range r.goal(&a) {
			if !v.tolerated && (v.structural || !raceOn) {
				out = append(out, fmt.Sprintf("%s: %s: %s: %s", r.c.name(), a.name, v.what, v.detail))
			}
		}
	}
	return out
}

// summaryTable is the table for one protocol: a row per fault, a
// column per arm: the bad phase's success rate, its p99, and #0's share
// after the first second.
func summaryTable(results []*caseResult, proto string) string {
	var b strings.Builder
	names := armsOf(proto)
	b.WriteString("| backend #0 | " + strings.Join(names, " | ") + " |\n|---|" + strings.Repeat("---|", len(names)) + "\n")
	for _, r := range results {
		if r.c.proto != proto || r.c.all {
			continue
		}
		row := []string{r.c.short()}
		for _, n := range names {
			a := r.arm(n)
			if a == nil {
				row = append(row, "not run")
				continue
			}
			bad := a.ph[phaseBad]
			cell := fmt.Sprintf("%s, p99 %s, #0 %.0f %%", pct(bad), ms(bad.p99), 100*a.share)
			if a.refusals > 0 {
				cell += fmt.Sprintf(", **%d refused**", a.refusals)
			}
			if r.goalApplies(a) {
				if len(r.goal(a)) > 0 && !allHeld(r.goal(a)) {
					cell += " ✗"
				} else {
					cell += " ✓"
				}
			}
			row = append(row, cell)
		}
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}

func allHeld(vs []verdict) bool {
	for _, v := range vs {
		if !v.held {
			return false
		}
	}
	return true
}

// command is the go test command of this run, its flags included.
func command() string {
	var b strings.Builder
	b.WriteString("cd bench && go test ./endpoints/ -run TestEndpoints")
	flag.Visit(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, "endpoints.") {
			v := f.Value.String()
			if strings.ContainsAny(v, "|()*?[]{}$ ") {
				v = "'" + v + "'"
			}
			fmt.Fprintf(&b, " -%s=%s", f.Name, v)
		}
	})
	return b.String()
}

const docMarker = "<!-- Below: written by `cd bench && go test ./endpoints/ -endpoints.full -endpoints.write-docs`. -->"

// writeDoc writes the measured part of ../../docs/endpoints.md from this
// run: below docMarker, keeping what is above it (or a short heading, if
// the file is new).
func writeDoc(results []*caseResult, tm timing) error {
	path := filepath.Join("..", "..", "docs", "endpoints.md")
	intro := "# One bad backend among ten: per-endpoint ejection, measured\n\n"
	if old, err := os.ReadFile(path); err == nil {
		if before, _, found := strings.Cut(string(old), docMarker); found {
			intro = before
		}
	} else if !os.IsNotExist(err) {
		return err
	}
	var b strings.Builder
	b.WriteString(intro + docMarker + "\n\n")
	b.WriteString("## Measured: one bad backend of ten\n\n")
	b.WriteString("Generated by `bench/endpoints` (`TestEndpoints`); every number below was measured in the one run that wrote it (the lab's E1, `go run ./cmd/callguard-lab --only E1`, runs a smaller version):\n\n")
	fmt.Fprintf(&b, "```sh\n%s\n```\n\n", command())
	fmt.Fprintf(&b, "%s, %s/%s, %d CPUs (GOMAXPROCS %d). Each case: %v healthy, backend #0 (or every backend) bad for %v (the issue's first measurement kept it bad for 12 s), then %v healed.\n\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), tm.warm, tm.bad, tm.healed)
	fmt.Fprintf(&b, "Every arm has its own ten backends, on 127.0.0.2 … 127.0.0.11 with one port (Linux routes 127/8 to the loopback interface), behind one name (`%s`) resolved by the test's own resolver: for gRPC a `resolver/manual` resolver giving the ten addresses as endpoints, for HTTP a `LookupHost` giving the ten addresses. The arms run at the same time: %d callers each, a closed loop (a caller starts its next call when its last ends; after a call that failed in under %v it waits out the rest), each call with a %v deadline. A backend is grpc-go's interop TestService (`UnaryCall`) or a net/http server (GET or POST `/unary`), answering a %d-byte payload after a service time of %v; the faults: failing (UNAVAILABLE / 503 at once), hanging (no answer until the request's context ends), slow (×%d: %v), flapping (failing %v, serving %v, and again). Each backend records the time of every request it receives.\n\n",
		serviceName, callers, failPace, deadline, bodySize, service, slowBy, slowBy*service, flapHalf, flapHalf)
	b.WriteString("| protocol | arm | configuration |\n|---|---|---|\n")
	for _, a := range armConfigs {
		fmt.Fprintf(&b, "| %s | `%s` | %s |\n", a.proto, a.name, a.config)
	}
	b.WriteString("\nWhat the columns say. *ok / started*: calls that succeeded, of the calls started in the phase. *p50 / p99*: of the successful calls started in the bad phase; *warm-up p99*: the same arm's before the fault; the goal's healthy p99 is the `control` arm's in the bad phase (ten backends that stay healthy, beside the others, under the same load of the host). *#0 after its first second / fair share*: the requests backend #0 received from one second after the fault's start to the heal, against a tenth of what the ten received then (retries included). *refused*: calls the client refused itself (an open breaker, the adaptive limit) in the bad phase, while nine backends were healthy. *#0 paused from (servers)*: from the fault's start to the last request #0 received before its first pause of at least 250 ms while the other backends received at least 50 requests (out of the picks, as the servers saw it); with keep-alives a backend that hangs receives few requests anyway (each holds its connection until the deadline, and the pool's other connections serve the callers), so a pause is not an ejection there. *#0 ejected / readmitted (policy)*: the per-endpoint policy's own account (`endpoint.Settings.OnChange`), from the fault's start and from the heal (0: not ejected at the heal). *#0 back after the heal (servers)*: from the heal to the first request to #0 that begins a 250 ms window in which it received half its fair share.\n\n")
	fmt.Fprintf(&b, "The goal (issue 34), for the per-endpoint arms with one backend failing, hanging or slow: ≥ %.1f %% of the calls succeed, idempotent or not, with p99 within the healthy p99 + %v; #0 receives ≤ %.0f %% of its fair share after the first second; no healthy backend refused; #0 ejected within %v of the fault's start and readmitted within %v of the heal; with every backend failing, at most the max ejection percent (one of ten) ejected at once and the per-method or per-host breaker opening as today. ✓ / ✗ in the tables: the goal met or not, as stated, without the test's allowance; the cases list each verdict.\n\n",
		100*goalSuccess, goalP99Over, 100*goalShare, goalEject, goalReadmit)
	b.WriteString("### gRPC: the bad phase's success, p99, #0's share of its fair share after the first second\n\n" + summaryTable(results, "grpc") + "\n")
	b.WriteString("### HTTP\n\n" + summaryTable(results, "http") + "\n")
	b.WriteString("## The cases\n\n")
	for _, r := range results {
		b.WriteString("### " + r.c.name() + "\n\n" + r.text() + "\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
