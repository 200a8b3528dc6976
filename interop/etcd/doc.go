// Package etcd holds the tests of callguard's gRPC interceptors inside
// etcd's client, go.etcd.io/etcd/client/v3, against a real etcd server
// (Debian's etcd-server) that the tests start and stop: a client library
// with a retry of its own above the interceptors, with grpc.WaitForReady
// on every call, and a watch that lives across a restart. It is a module
// of its own, so that etcd's client stays out of callguard's go.mod; it
// exports nothing. docs/grpc.md, "Client libraries with their own retry",
// gives the settings these tests hold to.
package etcd
