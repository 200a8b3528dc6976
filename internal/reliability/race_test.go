//go:build race

package reliability

// The race detector allows at most 8,128 goroutines alive at once: under
// it, the suites run fewer calls at once.
const raceEnabled = true
