module example.com/fixture

go 1.26.0

require github.com/callguard/callguard v0.0.0-00010101000000-000000000000

require (
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
)

replace github.com/callguard/callguard => ../../../..
