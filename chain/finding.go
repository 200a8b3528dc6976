package chain

import "fmt"

// Severity ranks a [Finding].
type Severity int

const (
	// Warning: the chain is built and the finding kept in Findings.
	Warning Severity = iota + 1
	// Error: New fails.
	Error
	// Info: a trade-off the chain makes, said in numbers; kept in Findings,
	// never an error, also in strict mode.
	Info
)

// String returns "warning", "error" or "info".
func (s Severity) String() string {
	switch s {
	case Warning:
		return "warning"
	case Error:
		return "error"
	case Info:
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

// Error formats the finding, so that a finding of severity Error is an error.
func (f Finding) Error() string {
	return fmt.Sprintf("chain: %s %s: %s", f.Severity, f.Code, f.Message)
}

// String is Error.
func (f Finding) String() string { return f.Error() }
