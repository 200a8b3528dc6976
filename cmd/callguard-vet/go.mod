module github.com/callguard/callguard/cmd/callguard-vet

go 1.26.0

replace github.com/callguard/callguard => ../..

require (
	github.com/callguard/callguard v0.0.0-00010101000000-000000000000
	github.com/golangci/plugin-module-register v0.1.2
)

require go.yaml.in/yaml/v3 v3.0.6 // indirect

require (
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/tools v0.52.0
)
