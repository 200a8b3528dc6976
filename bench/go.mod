module github.com/callguard/callguard/bench

go 1.26

replace github.com/callguard/callguard => ../

require (
	github.com/callguard/callguard v0.0.0
	github.com/cenkalti/backoff/v4 v4.3.0
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/sony/gobreaker/v2 v2.4.0
)

require github.com/bits-and-blooms/bitset v1.24.4 // indirect
