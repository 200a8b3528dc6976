// Package examples wires callguard to other libraries (the OpenTelemetry
// SDK's Prometheus exporter, otelhttp) and walks through a first program,
// in a module of its own so that the kit's
// go.mod does not require the exporter (the kit's tests use the SDK
// itself, to read metrics back). Its Examples run with go test.
package examples
