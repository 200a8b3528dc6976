// Package scenario holds the experiments of SEEDS.md as drivers that tests
// and the lab share. Drivers take their time from the standard library only:
// run them inside a testing/synctest bubble to get virtual time (a 600 s
// scenario in milliseconds, the same numbers every run), or in real time.
package scenario
