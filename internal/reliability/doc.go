// Package reliability holds the kit's fault suites, as tests: 10,000
// concurrent calls through each adapter, healthy then failing; a downstream
// in a process of its own killed with SIGKILL under load and restarted;
// and the memory that many calls in flight take. Each suite checks that
// every call is accounted for and returns within its deadline, and that
// goroutines and file descriptors go back to where they were. See
// docs/reliability.md.
package reliability
