module github.com/callguard/callguard

go 1.26

require github.com/sony/gobreaker/v2 v2.4.0

require go.uber.org/goleak v1.3.0 // indirect
