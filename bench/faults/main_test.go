// Package faults is callguard's real-fault suite: the recommended chains
// (grpcmw.Standard, httpmw.Standard) side by side with a plain client,
// grpc-go's own retry and failsafe-go at the preset's numbers, each arm
// with its own real server behind its own toxiproxy proxy (in process),
// under the same fault at the same instant. It measures every arm and
// tests the "do no harm" invariant (docs/faults.md):
//
//	cd bench && go test ./faults/                        # the bounded matrix, about a minute
//	cd bench && go test ./faults/ -faults.full -v        # every cell, about 7 minutes
//	cd bench && go test ./faults/ -faults.full -faults.write-docs
//
// The package is tests only.
package faults

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

var (
	fullMatrix = flag.Bool("faults.full", false, "run every cell of the fault matrix, not only the bounded one")
	cellsOnly  = flag.String("faults.cells", "", "run only the cells whose name (proto/fault) matches this regexp")
	writeDocs  = flag.Bool("faults.write-docs", false, "write ../docs/faults.md from this run")
	faultFor   = flag.Duration("faults.window", 0, "how long each fault lasts (0: 3s bounded, 8s full; an outage always 3s)")
	warmFor    = flag.Duration("faults.warmup", 0, "healthy traffic before each fault (0: 1.5s bounded, 2s full)")
	recoverFor = flag.Duration("faults.recovery", 0, "traffic after each fault is removed (0: 2s bounded, 3s full)")
)

// roleEnv makes this test binary, started again by the suite, a helper
// process: a server to pause (roleServe) or a CPU burner (roleBurn).
const roleEnv = "CALLGUARD_FAULTS_ROLE"

const (
	roleServe = "serve"
	roleBurn  = "burn"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case roleServe:
		if err := serveProcess(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case roleBurn:
		burn()
		os.Exit(0)
	}
	// toxiproxy logs through zerolog, some of it through zerolog's global
	// logger at trace level: none of it is the suite's.
	zerolog.SetGlobalLevel(zerolog.Disabled)
	os.Exit(m.Run())
}

// selfCommand is this test binary started again in role.
func selfCommand(role string, env ...string) *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), roleEnv+"="+role), env...)
	return cmd
}

// burn spins on every CPU of the process until its standard input closes:
// other work on the client's host.
func burn() {
	var done atomic.Bool
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString(0) // until EOF
		done.Store(true)
	}()
	n := runtime.GOMAXPROCS(0)
	finished := make(chan struct{}, n)
	for range n {
		go func() {
			x := uint64(1)
			for !done.Load() {
				for range 1 << 16 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			_ = x
			finished <- struct{}{}
		}()
	}
	for range n {
		<-finished
	}
}

// burners are CPU burners in processes of their own, one per CPU, each
// spinning on every CPU it has: the client's host loaded by other work.
type burners struct{ cmds []*exec.Cmd }

func startBurners() (*burners, error) {
	b := &burners{}
	for range runtime.NumCPU() {
		cmd := selfCommand(roleBurn, "GOMAXPROCS=1")
		if _, err := cmd.StdinPipe(); err != nil {
			b.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			b.stop()
			return nil, err
		}
		b.cmds = append(b.cmds, cmd)
	}
	return b, nil
}

// stop kills the burners and waits for them. (A burner whose parent dies
// first sees its standard input close, and stops.)
func (b *burners) stop() {
	for _, cmd := range b.cmds {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	b.cmds = nil
}

// timing is a cell's timeline.
type timing struct {
	warm, fault, outage, recovery time.Duration
}

func cellTiming() timing {
	t := timing{warm: 1500 * time.Millisecond, fault: 3 * time.Second, outage: 3 * time.Second, recovery: 2 * time.Second}
	if *fullMatrix {
		t.warm, t.fault, t.recovery = 2*time.Second, 8*time.Second, 3*time.Second
	}
	if *warmFor > 0 {
		t.warm = *warmFor
	}
	if *faultFor > 0 {
		t.fault = *faultFor
	}
	if *recoverFor > 0 {
		t.recovery = *recoverFor
	}
	return t
}

// jsonLine writes v as one line of JSON.
func jsonLine(w *bufio.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return err
	}
	return w.Flush()
}
