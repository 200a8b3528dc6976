package endpoint

import (
	"slices"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
)

// Findings returns what the chain's lint finds in the breaker s gives
// each endpoint (its defaults filled in), as chain.New would for a chain
// of that breaker alone: too many probes, probes that rarely all succeed,
// and the rest of the breaker's rules. CG009 (no attempt timeout inside
// the breaker) is left out: the set judges a call that a deadline ended
// after the slow threshold a failure of its endpoint, and passes by an
// endpoint whose calls hang. An invalid s is an *Error.
func Findings(s Settings) ([]chain.Finding, error) {
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	b, err := breaker.New(s.Breaker)
	if err != nil {
		return nil, &Error{"Breaker", err}
	}
	c, err := chain.New(b)
	if err != nil {
		return nil, &Error{"Breaker", err}
	}
	return slices.DeleteFunc(c.Findings(), func(f chain.Finding) bool { return f.Code == "CG009" }), nil
}
