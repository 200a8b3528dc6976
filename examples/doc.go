// Package examples wires callguard to other libraries (the OpenTelemetry
// SDK and its Prometheus exporter), in a module of its own so that the
// kit's go.mod keeps none of them. Its Examples run with go test.
package examples
