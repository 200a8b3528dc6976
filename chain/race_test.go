//go:build race

package chain_test

const raceEnabled = true
