package breaker

// Snapshot is a breaker's state and counters at one moment, as an adapter
// lists the breakers of its chains (grpcmw and httpmw's Breakers methods):
// with the key of the chain it belongs to in a keyed set.
type Snapshot struct {
	Key      string // the key of the breaker's chain in a keyed set; "" outside one
	Name     string // the breaker's Settings.Name
	State    State
	Override Override // set by an operator: ForceOpen, Disable
	Counts   Counts
}
