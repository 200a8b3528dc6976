package chain

import "fmt"

// Severity ranks a [Finding].
type Severity int

const (
	// SeverityWarning: the chain is built and the finding kept in Findings.
	SeverityWarning Severity = iota + 1
	// SeverityError: New fails.
	SeverityError
	// SeverityInfo: a trade-off the chain makes, said in numbers; kept in Findings,
	// never an error, also in strict mode.
	SeverityInfo
)

// String returns "warning", "error" or "info".
func (s Severity) String() string {
	switch s {
	case SeverityWarning:
		return "warning"
	case SeverityError:
		return "error"
	case SeverityInfo:
		return "info"
	default:
		return fmt.Sprintf("Severity(%d)", int(s))
	}
}

// Finding is one result of the lint: a stable Code (see [Rules]), a
// Severity, and a Message that says what will happen, in numbers computed
// from the settings, why, and the fix.
type Finding struct {
	Code     string
	Severity Severity
	Message  string
}

// Error formats the finding, so that a finding of severity SeverityError is an error.
func (f Finding) Error() string {
	return fmt.Sprintf("chain: %s %s: %s", f.Severity, f.Code, f.Message)
}

// String is Error.
func (f Finding) String() string { return f.Error() }
