package scenario

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
)

func TestMain(m *testing.M) {
	ServeIfProcess()
	os.Exit(m.Run())
}

// TestProcess runs a short outage (its timeline × 0.04: 1.2 s down) with
// the downstream in another process: every call the stack made crossed to
// it, its Record came back (the outage's refusals among it), and the
// process ended with the run.
func TestProcess(t *testing.T) {
	var cmd *exec.Cmd
	command := func() *exec.Cmd { cmd = SelfProcess(); return cmd }
	var calls atomic.Int64
	counting := StackFunc(func(ctx context.Context, call func(context.Context) error) error {
		calls.Add(1)
		return call(ctx)
	})
	sc := Scenarios[0].Scaled(0.04)
	res, err := Run(Cell{Server: Model, Scenario: sc, Load: Loads[0], Seed: 1, Downstream: Process(command)}, counting)
	if err != nil {
		t.Fatal(err)
	}
	srv := res.Server
	if n := int(calls.Load()); n == 0 || srv.Received != n {
		t.Errorf("the stack made %d calls, the process's server received %d; want equal and > 0", n, srv.Received)
	}
	if srv.Refused == 0 || srv.Answered == 0 || res.Successes == 0 || res.Successes >= res.Requests {
		t.Errorf("refused %d, answered %d, %d successes of %d requests: want an outage between healthy traffic", srv.Refused, srv.Answered, res.Successes, res.Requests)
	}
	if cmd == nil || cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		t.Errorf("the downstream process did not end cleanly with the run: %v", cmd.ProcessState)
	}
}

// TestProcessNeedsAKnownScenario: a process rebuilds its scenario by
// name, so a scenario not in Scenarios, or changed from the one of its
// name, is an error before any process starts.
func TestProcessNeedsAKnownScenario(t *testing.T) {
	started := false
	command := func() *exec.Cmd { started = true; return SelfProcess() }
	custom := Scenarios[0]
	custom.Name = "custom"
	changed := Scenarios[0]
	changed.Queue = 7
	for _, sc := range []Scenario{custom, changed} {
		_, err := Run(Cell{Server: Model, Scenario: sc, Load: Loads[0], Seed: 1, Downstream: Process(command)}, None)
		if err == nil || !strings.Contains(err.Error(), `"`+sc.Name+`"`) {
			t.Errorf("scenario %q (queue %d): %v, want an error naming it", sc.Name, sc.Queue, err)
		}
	}
	if started {
		t.Error("a process was started for a scenario it cannot rebuild")
	}
}

// TestProcessThatFails: a process that ends before it listens is the
// run's error, with what it said.
func TestProcessThatFails(t *testing.T) {
	command := func() *exec.Cmd { return exec.Command("sh", "-c", "echo no downstream here >&2; exit 3") }
	_, err := Run(Cell{Server: Model, Scenario: Scenarios[0], Load: Loads[0], Seed: 1, Downstream: Process(command)}, None)
	if err == nil || !strings.Contains(err.Error(), "no downstream here") {
		t.Errorf("%v, want the process's own words", err)
	}
}
