module github.com/callguard/callguard

go 1.26

require (
	github.com/cenkalti/backoff/v4 v4.3.0
	github.com/sony/gobreaker/v2 v2.4.0
	go.uber.org/goleak v1.3.0
)
