//go:build !race

package endpoints

const raceOn = false
