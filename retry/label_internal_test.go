package retry

import (
	"regexp"
	"testing"
)

// TestReasonLabels: the callguard.reason values of the adapters'
// callguard.retry.exhausted metric are short fixed snake_case words, one
// per reason, not the sentences of Reason.String.
func TestReasonLabels(t *testing.T) {
	want := map[Reason]string{
		ReasonAttempts: "attempts_exhausted",
		ReasonDeadline: "deadline",
		ReasonBudget:   "budget_exhausted",
		ReasonPushback: "pushback",
		ReasonCanceled: "canceled",
		ReasonOpen:     "breaker_open",
	}
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	seen := map[string]Reason{}
	for r := ReasonAttempts; r <= ReasonOpen; r++ {
		l := r.label()
		if l != want[r] || !snake.MatchString(l) {
			t.Errorf("%v: label %q, want %q", r, l, want[r])
		}
		if o, dup := seen[l]; dup {
			t.Errorf("%v and %v share the label %q", o, r, l)
		}
		seen[l] = r
	}
}
