// Package testserver has the real servers that tests, benchmarks and the lab
// run against: an HTTP server (net/http/httptest) and a gRPC server (the
// standard health service, on 127.0.0.1:0 or on a bufconn listener). Each
// answers as a function of the request's number says — fail, hang, delay,
// return a status, send pushback or Retry-After — and counts what it
// received.
package testserver
