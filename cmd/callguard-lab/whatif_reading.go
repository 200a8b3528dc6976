package main

// What a what-if table says in words: the legend printed before the
// tables, each scenario's setup, and each table's one-line reading,
// computed from its numbers.

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/callguard/callguard/internal/scenario"
)

// seconds formats d as "20 s", "2 s", "0.5 s".
func seconds(d time.Duration) string {
	return strconv.FormatFloat(math.Round(d.Seconds()*100)/100, 'f', -1, 64) + " s"
}

// describeScenario is a table's setup: what the fault does, and its
// timeline.
func describeScenario(sc scenario.Scenario) string {
	about := ""
	if sc.About != "" {
		about = sc.Name + ": " + sc.About + ". "
	}
	return fmt.Sprintf("%sHealthy for %s, then the fault for %s; the downstream itself is healthy again (healed) %s after the fault started; measured from the fault's start until %s after it.",
		about, seconds(sc.Start), seconds(sc.Length), seconds(sc.Healed), seconds(sc.Horizon))
}

// columnLegend defines the what-if tables' columns, in their order (the
// model's metrics: docs/protection.md, "The model").
var columnLegend = [][2]string{
	{"downstream calls per request", "the calls that reached the downstream per request started during the fault: 1.00 is one call each; retries and hedges add, a breaker's, throttle's or limit's refusals take away"},
	{"time to trip", "from the fault's start to the first request refused without reaching the downstream (by a breaker, a throttle or a limit); never: none was"},
	{"recovered after the downstream", "from the downstream's own healing until, for 3 s in a row, 95 % of the warm-up's share of requests succeed again; 0.0 s: at once; not within the run: not before its end"},
	{"caller p50 / p99", "the callers' latency, successes and failures alike, of the requests started from the fault's start on"},
	{"server work wasted", "worker time the downstream spent on requests whose caller had already given up, over the whole run (worker-seconds)"},
	{"successes", "requests that succeeded, ending from the fault's start until the end of the run: the headline"},
}

// printLegend says, once before the tables, what their names mean.
func printLegend(w io.Writer, load scenario.Load, scs []whatIfScenario, stacks []stack, live bool) {
	line := func(indent, s string) {
		fmt.Fprintln(w, indent+strings.ReplaceAll(wrap(s, 100-len(indent)), "\n    ", "\n"+indent+"  "))
	}
	fmt.Fprintln(w, "\nHow to read the tables (docs/protection.md, \"The model\", defines them too):")
	var l string
	switch {
	case load.Rate > 0 && load.Name == scenario.Loads[0].Name:
		l = fmt.Sprintf("an open loop: requests arrive at random (Poisson) at %.0f a second, 60 %% of the downstream's capacity of %.0f a second, whatever happens to the earlier ones", load.Rate, scenario.Model.Capacity())
	case load.Rate > 0:
		l = fmt.Sprintf("an open loop: requests arrive at random (Poisson) at %g a second (the downstream's capacity: %.0f a second)", load.Rate, scenario.Model.Capacity())
	default:
		l = fmt.Sprintf("a closed loop: %d callers, each starting its next request when its last one ends, at most one every %v", load.Callers, load.Pace)
	}
	line("  ", fmt.Sprintf("load %s: %s; each request has a %v deadline, after which its caller gives up.", load.Name, l, load.Deadline))
	timeline := "healthy for 20 s (the warm-up), then the fault; \"healed N s after it started\" is when the downstream itself is healthy again, counted from the fault's start; a run is measured from the fault's start until 60 s after it."
	if live {
		timeline = "the same, every duration of it × 0.1 (the table's setup says the real ones)."
	}
	line("  ", "scenarios: "+timeline)
	for _, s := range scs {
		line("    ", fmt.Sprintf("%s %s: %s", s.id, s.sc.Name, s.sc.About))
	}
	line("  ", "columns:")
	for _, c := range columnLegend {
		line("    ", c[0]+": "+c[1])
	}
	var rows []string
	for _, st := range stacks {
		switch st.name {
		case rowYours:
			rows = append(rows, "your chain: the file's")
		case rowCanonical:
			rows = append(rows, "canonical order: the same policies, reordered")
		case rowRecommended:
			rows = append(rows, "recommended chain: package preset's, the protection benchmark's best (docs/protection.md)")
		case rowNone:
			rows = append(rows, "no protection: one call per request, nothing else")
		}
	}
	line("  ", "rows: "+strings.Join(rows, "; ")+".")
}

// successesSplit is a run's successes during the fault and after it.
func successesSplit(sc scenario.Scenario, r scenario.Result) (during, after int) {
	during = int(math.Round(r.GoodputFault * sc.Length.Seconds()))
	return during, r.Successes - during
}

// count3 is n with its thousands grouped: 12,345.
func count3(n int) string {
	s := strconv.Itoa(max(n, -n))
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if n < 0 {
		return "-" + s
	}
	return s
}

// alike reports two counts within 1 % of each other (and of 10).
func alike(a, b int) bool {
	d := math.Abs(float64(a - b))
	return d <= 10 || d <= 0.01*math.Max(float64(a), float64(b))
}

// compare says how yours stands against other (named name), and when.
func compare(sc scenario.Scenario, yours, other scenario.Result, name string) string {
	if alike(yours.Successes, other.Successes) {
		return fmt.Sprintf("as many as the %s (%s, within 1 %%)", name, count3(other.Successes))
	}
	d := yours.Successes - other.Successes
	word := "more"
	if d < 0 {
		word = "fewer"
	}
	yd, ya := successesSplit(sc, yours)
	od, oa := successesSplit(sc, other)
	dd, da := yd-od, ya-oa
	when := fmt.Sprintf("%+d during the fault, %+d after it", dd, da)
	if sameSign(dd, da) {
		when = fmt.Sprintf("%s during the fault and %s after it", count3(max(dd, -dd)), count3(max(da, -da)))
	}
	switch {
	case sameSign(dd, d) && math.Abs(float64(dd)) >= 2*math.Abs(float64(da)):
		when = "mostly during the fault"
	case sameSign(da, d) && math.Abs(float64(da)) >= 2*math.Abs(float64(dd)):
		when = "mostly after it, as the downstream comes back"
	}
	return fmt.Sprintf("%s %s than the %s (%s), %s", count3(max(d, -d)), word, name, count3(other.Successes), when)
}

func sameSign(a, b int) bool { return a > 0 && b > 0 || a < 0 && b < 0 }

// reading is a table's one line: how your chain's successes stand against
// the canonical order's and the recommended chain's, when the difference
// arises, and, where a chain the lint warns about keeps more than the
// canonical order, that it does and what in the numbers may explain it.
func reading(sc scenario.Scenario, stacks []stack, runs []stackRun, warned []string) string {
	by := map[string]scenario.Result{}
	for i, st := range stacks {
		by[st.name] = runs[i].Result
	}
	yours := by[rowYours]
	var parts []string
	canon, reordered := by[rowCanonical]
	if reordered {
		parts = append(parts, compare(sc, yours, canon, rowCanonical))
	}
	if rec, ok := by[rowRecommended]; ok {
		parts = append(parts, compare(sc, yours, rec, rowRecommended))
	}
	s := fmt.Sprintf("your chain keeps %s successes: %s", count3(yours.Successes), strings.Join(parts, "; "))
	if none, ok := by[rowNone]; ok {
		s += fmt.Sprintf("; no protection keeps %s", count3(none.Successes))
	}
	s += "."
	if other, name := canon, rowCanonical; reordered || by[rowRecommended].Requests > 0 {
		if !reordered {
			other, name = by[rowRecommended], rowRecommended
		}
		if b := beyond(yours, other, name); b != "" {
			s += " Beyond the successes: " + b + "."
		}
	}
	if !reordered || len(warned) == 0 || yours.Successes <= canon.Successes || alike(yours.Successes, canon.Successes) {
		return s
	}
	return s + fmt.Sprintf(" The lint warns about your chain (%s), yet here it keeps more than the canonical order: %s. The findings say what the order costs elsewhere (their messages give the numbers); one scenario's count does not clear it.",
		strings.Join(warned, ", "), why(yours, canon))
}

// beyond says where else yours differs much from other (named name): its
// callers' waits, its breaker's trip, the calls it sends ("" if nowhere).
func beyond(yours, other scenario.Result, name string) string {
	var bs []string
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	if a, b := yours.P50, other.P50; (a > 2*b || b > 2*a) && max(a-b, b-a) >= 50*time.Millisecond {
		bs = append(bs, fmt.Sprintf("its callers wait %s at the median and %s at p99, against %s and %s with the %s", ms(a), ms(yours.P99), ms(b), ms(other.P99), name))
	}
	if yours.Detect < 0 && other.Detect >= 0 {
		bs = append(bs, fmt.Sprintf("it never refuses a request before it reaches the downstream, where the %s does from %.1f s", name, other.Detect.Seconds()))
	}
	if a, b := yours.Amplification, other.Amplification; a >= 1.5*b && a >= b+0.2 {
		bs = append(bs, fmt.Sprintf("it sends %.2f downstream calls per request during the fault, against %.2f", a, b))
	}
	return strings.Join(bs, "; ")
}

// why says what in the numbers may explain that yours kept more than
// canon: the calls it sent, when its breaker tripped, the work wasted.
func why(yours, canon scenario.Result) string {
	var rs []string
	switch a, b := yours.Amplification, canon.Amplification; {
	case a < 0.9*b:
		rs = append(rs, fmt.Sprintf("it sends fewer downstream calls per request (%.2f against %.2f): fewer attempts, less load on a downstream that is struggling", a, b))
	case a > 1.1*b:
		rs = append(rs, fmt.Sprintf("it sends more downstream calls per request (%.2f against %.2f): more of its requests reach a downstream that can still answer some", a, b))
	}
	switch a, b := yours.Detect, canon.Detect; {
	case a < 0 && b >= 0:
		rs = append(rs, fmt.Sprintf("its breaker never refuses a request, where the canonical order's first does at %.1f s", b.Seconds()))
	case a >= 0 && b >= 0 && a > b+time.Second:
		rs = append(rs, fmt.Sprintf("it refuses its first request later (%.1f s against %.1f s)", a.Seconds(), b.Seconds()))
	}
	if a, b := yours.Wasted, canon.Wasted; a < b*4/5 {
		rs = append(rs, fmt.Sprintf("it wastes less server work (%.1f against %.1f worker-s)", a.Seconds(), b.Seconds()))
	}
	if len(rs) == 0 {
		return "neither the calls it sends, nor when it trips, nor the work wasted differ much; compare the timelines (--report)"
	}
	return "it may be because " + strings.Join(rs, "; and ")
}
