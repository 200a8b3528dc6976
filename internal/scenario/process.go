package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
)

// ProcessEnv is the environment variable that makes a binary a downstream
// process: SelfProcess sets it, ServeIfProcess looks for it.
const ProcessEnv = "CALLGUARD_DOWNSTREAM_PROCESS"

// SelfProcess is a command for Process: this binary started again with
// ProcessEnv set. Its main — a test binary's TestMain — must call
// ServeIfProcess first.
func SelfProcess() *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), ProcessEnv+"=1")
	return cmd
}

// ServeIfProcess, in a binary started by SelfProcess, serves as a
// downstream process (ServeProcess on the standard input and output) and
// exits; otherwise it returns at once.
func ServeIfProcess() {
	if os.Getenv(ProcessEnv) == "" {
		return
	}
	if err := ServeProcess(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Process returns a Cell.Downstream that runs the cell's simulated server
// in another process, behind a real HTTP server on 127.0.0.1 (the statuses
// Loopback's are): the stack's calls cross a real socket to a downstream
// with its own runtime, scheduler and timers. command makes the process,
// which must run ServeProcess on its standard input and output — a test
// binary started again with an environment variable that its TestMain
// looks for, say. The cell's scenario must be one of Scenarios, scaled or
// not: the process rebuilds it by name. The server's clock starts when the
// process is ready, just before the run's load starts.
func Process(command func() *exec.Cmd) func(Cell) (func(context.Context) error, func() (Record, error), error) {
	return func(cell Cell) (func(context.Context) error, func() (Record, error), error) {
		spec, err := specOf(cell)
		if err != nil {
			return nil, nil, err
		}
		cmd := command()
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, nil, fmt.Errorf("scenario: downstream process: %w", err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, nil, fmt.Errorf("scenario: downstream process: %w", err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return nil, nil, fmt.Errorf("scenario: downstream process: %w", err)
		}
		dec := json.NewDecoder(stdout)
		end := func(err error) error {
			if werr := cmd.Wait(); err == nil && werr != nil {
				err = werr
			}
			if err != nil {
				return fmt.Errorf("scenario: downstream process %s: %w%s", cmd.Path, err, said(&stderr))
			}
			return nil
		}
		var ready processReady
		err = json.NewEncoder(stdin).Encode(spec)
		if err == nil {
			err = dec.Decode(&ready)
		}
		if err != nil {
			_ = stdin.Close()
			return nil, nil, end(err)
		}
		call, closeIdle := httpCall(ready.URL)
		stop := func() (Record, error) {
			closeIdle()
			_ = stdin.Close() // the process's cue to end
			var rec Record
			err := dec.Decode(&rec)
			return rec, end(err)
		}
		return call, stop, nil
	}
}

// said is what a process wrote on its standard error, for an error.
func said(stderr *bytes.Buffer) string {
	if s := strings.TrimSpace(stderr.String()); s != "" {
		return ": " + s
	}
	return ""
}

// ServeProcess is the body of a downstream process (Process): it reads
// the cell from in, starts its simulated server behind an HTTP server on
// 127.0.0.1 and says where on out; when in closes, it writes the server's
// Record on out and returns.
func ServeProcess(in io.Reader, out io.Writer) error {
	dec := json.NewDecoder(in)
	var spec processSpec
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("scenario: ServeProcess: reading the cell: %w", err)
	}
	cell, err := spec.cell()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("scenario: ServeProcess: %w", err)
	}
	sim := cell.start()
	defer sim.Stop()
	srv := &http.Server{Handler: handler(sim.Call)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	enc := json.NewEncoder(out)
	if err := enc.Encode(processReady{URL: "http://" + ln.Addr().String()}); err != nil {
		_ = srv.Close()
		<-served
		return fmt.Errorf("scenario: ServeProcess: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.MultiReader(dec.Buffered(), in)) // until in closes
	rec := sim.Record()
	_ = srv.Close()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("scenario: ServeProcess: %w", err)
	}
	return enc.Encode(rec)
}

// processSpec is what a downstream process is told: the cell's server,
// seed, and scenario by name and scale.
type processSpec struct {
	Server   Server
	Scenario string
	Scale    float64
	Seed     uint64
}

// processReady is what a downstream process answers when it listens.
type processReady struct {
	URL string
}

// specOf is the cell as a process is told it, or an error if the process
// could not rebuild the cell's scenario.
func specOf(cell Cell) (processSpec, error) {
	spec := processSpec{Server: cell.Server, Scenario: cell.Scenario.Name, Scale: cell.Scenario.scaledBy(), Seed: cell.Seed}
	rebuilt, err := spec.cell()
	if err != nil {
		return processSpec{}, err
	}
	a, b := rebuilt.Scenario, cell.Scenario
	if a.Start != b.Start || a.Length != b.Length || a.Horizon != b.Horizon || a.Healed != b.Healed || a.Queue != b.Queue || a.unit() != b.unit() {
		return processSpec{}, fmt.Errorf("scenario: Process: scenario %q is not the one of that name in Scenarios (scaled by %g): a downstream process rebuilds it by name", b.Name, spec.Scale)
	}
	return spec, nil
}

// cell is the cell the spec describes.
func (p processSpec) cell() (Cell, error) {
	for _, sc := range Scenarios {
		if sc.Name == p.Scenario {
			if p.Scale != 1 {
				sc = sc.Scaled(p.Scale)
			}
			return Cell{Server: p.Server, Scenario: sc, Seed: p.Seed}, nil
		}
	}
	return Cell{}, fmt.Errorf("scenario: Process: no scenario %q in Scenarios: a downstream process rebuilds its scenario by name", p.Scenario)
}
