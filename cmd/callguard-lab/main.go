// Command callguard-lab shows the kit doing its job: it reproduces the
// seeds' experiments (SEEDS A and C, see docs/seeds.md) live, over real
// loopback HTTP and gRPC servers, through the kit's real transport and
// interceptors, and prints each table as the seed prints it, with the
// seed's values beside the measured ones and a verdict; it kills a
// downstream process with SIGKILL mid-run and restarts it; and, given a
// chain described in a file, it says what that chain will do.
//
//	go run ./cmd/callguard-lab                  # every experiment, quick (≤ 2 minutes)
//	go run ./cmd/callguard-lab --full           # the seeds' own durations
//	go run ./cmd/callguard-lab --only C2 --proto grpc
//	go run ./cmd/callguard-lab --chain my.yaml  # what will my chain do?
//	go run ./cmd/callguard-lab --json out.json --report out/
//	go run ./cmd/callguard-lab --strict         # exit 1 if a table is not reproduced
//
// Quick runs scale every duration of an experiment down, keeping their
// ratios, and report the numbers in the seed's time; each table says by how
// much.
//
// Beside each real-time experiment the lab measures the machine's
// scheduling noise (how late a bare 1 ms timer wakes up) and judges the
// experiment's times against the seed's tolerance plus that lateness; counts
// stay exact, but for those a timer paces (A1's), which the lateness can
// move by a call per open period. A table not reproduced is reported, and the exit status is
// still 0: the numbers are the output. With --strict it is 1. An experiment
// that cannot run, or a bad flag, exits non-zero always (1, or 2 for usage).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/callguard/callguard/internal/scenario"
)

// lab is one run of the command.
type lab struct {
	ctx      context.Context
	out      io.Writer
	full     bool
	report   *Report
	progress *progress
	children *children
	running  experiment           // the experiment under way
	noise    *scenario.NoiseProbe // the scheduling noise beside the seeds' experiments (nil: not measured)
	drawn    int                  // the report's timelines that belong to a table already added
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(serve(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command, with its arguments and where it writes; it returns
// the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("callguard-lab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	full := fs.Bool("full", false, "run the reference experiments' own durations (SEEDS A and C; slower), not the quick scaled ones")
	only := fs.String("only", "", "run only the experiments whose ids start with these, comma-separated (A1, A2, A3, C1, C2, C3, C4, K1, E1; or A, C); with --chain or --service-config, the what-if scenarios (W1 … W12, or by name: blackhole, delay)")
	proto := fs.String("proto", "both", "the protocol of the experiments: http, grpc or both")
	jsonOut := fs.String("json", "", "write every measured number, with its unit and its reference value, to this file")
	reportDir := fs.String("report", "", "write a self-contained index.html with the tables and timelines to this directory")
	chainFile := fs.String("chain", "", "a chain described in a JSON or YAML file: lint it and run it through the protection scenarios")
	rate := fs.Float64("rate", 0, "with --chain: open-loop requests per second (default: 60 % of the model's capacity)")
	callers := fs.Int("callers", 0, "with --chain: a closed loop of this many callers instead of the open loop")
	live := fs.Bool("live", false, "with --chain: run in real time over a real loopback HTTP server (each scenario's timeline × 0.1), not in virtual time")
	serviceConfig := fs.String("service-config", "", "a gRPC service config (JSON): run the chain its methodConfig converts to (grpcmw.FromServiceConfig) through the protection scenarios")
	method := fs.String("method", "", "with --service-config: the method whose methodConfig runs (default: the one for every method, else the first)")
	strict := fs.Bool("strict", false, "exit 1 when a table is not reproduced (default: report it, exit 0)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "callguard-lab: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var protos []string
	switch *proto {
	case "http", "grpc":
		protos = []string{*proto}
	case "both":
		protos = []string{"http", "grpc"}
	default:
		fmt.Fprintf(stderr, "callguard-lab: --proto %q: want http, grpc or both\n", *proto)
		return 2
	}
	if err := checkOutputs(*jsonOut, *reportDir); err != nil {
		fmt.Fprintf(stderr, "callguard-lab: %v\n", err)
		return 2
	}
	// Go's flag package has parsed nothing of its own: the testing package
	// that virtual time runs on must not take the lab's arguments.
	_ = flag.CommandLine.Parse(nil)

	ctx, status, stop := interruption()
	defer stop()
	kids := &children{}
	defer kids.killAll()
	mode := "quick"
	if *full {
		mode = "full"
	}
	out := &gate{w: stdout}
	l := &lab{ctx: ctx, out: out, full: *full, progress: newProgress(stderr), children: kids,
		report: &Report{Mode: mode, Proto: *proto, Started: time.Now()}}

	done := make(chan error, 1)
	go func() {
		switch {
		case *chainFile != "" && *serviceConfig != "":
			done <- errors.New("--chain and --service-config: one at a time")
		case *serviceConfig != "":
			done <- l.whatIfServiceConfig(*serviceConfig, *method, *only, *rate, *callers, *live)
		case *chainFile != "":
			done <- l.whatIf(*chainFile, *only, *rate, *callers, *live)
		default:
			done <- l.seeds(*only, protos)
		}
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
	}
	if ctx.Err() != nil {
		// The run ends now: nothing more on its output, its downstream
		// processes killed, and grace for what it runs to end on its own
		// (a second signal ends it at once).
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(again)
		out.shut()
		l.progress.halt()
		kids.close()
		select {
		case <-done:
		case <-again:
		case <-time.After(grace):
		}
		fmt.Fprintln(stderr, "\ncallguard-lab: interrupted")
		return status()
	}
	l.progress.clear()
	l.report.Elapsed = time.Since(l.report.Started).Seconds()
	// The report first: it creates its directory, where --json may write.
	if err == nil && *reportDir != "" {
		err = writeHTML(*reportDir, l.report)
	}
	if err == nil && *jsonOut != "" {
		err = l.report.writeJSON(*jsonOut)
	}
	if err != nil {
		fmt.Fprintf(stderr, "callguard-lab: %v\n", err)
		return 1
	}
	failed, measured := 0, 0
	for _, t := range l.report.Tables {
		switch {
		case t.Unjudged:
			measured++
		case !t.Pass:
			failed++
		}
	}
	took := time.Duration(l.report.Elapsed * float64(time.Second)).Round(100 * time.Millisecond)
	if measured > 0 {
		fmt.Fprintf(stdout, "\n%d scenarios in %s (%s).\n", measured, took, l.report.Mode)
		return 0
	}
	fmt.Fprintf(stdout, "\n%d tables in %s (%s): %d reproduced, %d not", len(l.report.Tables), took, mode, len(l.report.Tables)-failed, failed)
	if l.report.NoiseSamples > 0 {
		fmt.Fprintf(stdout, "; scheduling noise up to %s (a bare timer's worst lateness, %s samples)",
			quantity(l.report.NoiseMax, "ms"), quantity(float64(l.report.NoiseSamples), ""))
	}
	switch {
	case failed > 0 && *strict:
		fmt.Fprintln(stdout, ". Exit status 1 (--strict).")
		return 1
	case failed > 0:
		fmt.Fprintln(stdout, ". Exit status 0 all the same: --strict makes it 1.")
	default:
		fmt.Fprintln(stdout, ".")
	}
	return 0
}

// checkOutputs checks, before anything runs, that the run's outputs can be
// written: the --json file's directory exists and is writable (or is the
// --report directory, or in it, which the report creates), and the --report
// directory exists and is writable, or can be created. The error names the
// flag and the path.
func checkOutputs(jsonOut, reportDir string) error {
	if reportDir != "" {
		// The directory, or the nearest of its parents that exists: the
		// report creates the rest.
		d := filepath.Clean(reportDir)
		for {
			if _, err := os.Stat(d); err == nil || !errors.Is(err, fs.ErrNotExist) || filepath.Dir(d) == d {
				break
			}
			d = filepath.Dir(d)
		}
		if err := writableDir(d); err != nil {
			return fmt.Errorf("--report %s: cannot create or write the directory: %w", reportDir, err)
		}
	}
	if jsonOut != "" {
		if st, err := os.Stat(jsonOut); err == nil && st.IsDir() {
			return fmt.Errorf("--json %s: is a directory, want a file", jsonOut)
		}
		dir := filepath.Dir(jsonOut)
		if reportDir != "" && within(dir, reportDir) {
			if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
				if d := filepath.Clean(dir); d != filepath.Clean(reportDir) {
					return fmt.Errorf("--json %s: directory %s does not exist (only the --report directory itself is created)", jsonOut, dir)
				}
				return nil // the report creates it, and writes first
			}
		}
		if err := writableDir(dir); err != nil {
			return fmt.Errorf("--json %s: %w", jsonOut, err)
		}
		if f, err := os.OpenFile(jsonOut, os.O_WRONLY, 0); err == nil {
			_ = f.Close()
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("--json %s: %w", jsonOut, err)
		}
	}
	return nil
}

// writableDir says why dir is not a directory a file can be created in
// (nil: it is).
func writableDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("directory %s does not exist", dir)
	case err != nil:
		return err
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".callguard-lab-*")
	if err != nil {
		return fmt.Errorf("directory %s is not writable: %w", dir, err)
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}

// within says whether path is dir or inside it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// grace is how long an interrupted run has to end on its own before the
// command exits anyway: the seeds' experiments and the scenarios run to
// their end once started, and the command ends within this of a Ctrl-C.
const grace = time.Second

// interruption returns the lab's context, done on SIGINT (Ctrl-C) or
// SIGTERM; once it is done, status is the exit status that says which:
// 130 or 143, 128 and the signal's number, as a shell reports it.
func interruption() (ctx context.Context, status func() int, stop func()) {
	interrupted, stopInt := signal.NotifyContext(context.Background(), os.Interrupt)
	ctx, stopTerm := signal.NotifyContext(interrupted, syscall.SIGTERM)
	status = func() int {
		if interrupted.Err() != nil {
			return 128 + 2
		}
		return 128 + 15
	}
	return ctx, status, func() { stopTerm(); stopInt() }
}

// gate passes writes to w until it is shut, and drops them after: what an
// interrupted run still prints is not the command's output.
type gate struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool // guarded by mu
}

func (g *gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return len(p), nil
	}
	return g.w.Write(p)
}

func (g *gate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
}

// seeds runs the seeds' experiments selected by only, over protos.
func (l *lab) seeds(only string, protos []string) error {
	var sel []experiment
	for _, e := range experiments {
		if only == "" {
			sel = append(sel, e)
			continue
		}
		for _, o := range strings.Split(only, ",") {
			if o = strings.TrimSpace(o); o != "" && strings.HasPrefix(e.id, strings.ToUpper(o)) {
				sel = append(sel, e)
				break
			}
		}
	}
	if len(sel) == 0 {
		return fmt.Errorf("--only %q selects no experiment (A1, A2, A3, C1, C2, C3, C4, K1)", only)
	}
	fmt.Fprintf(l.out, "callguard lab: the reference experiments (SEEDS A and C), live over loopback (%s run", l.report.Mode)
	if !l.full {
		fmt.Fprint(l.out, "; --full for the references' own durations")
	}
	fmt.Fprintln(l.out, ").")
	runs := func(e experiment) []string {
		if e.perProto {
			return protos
		}
		return []string{""}
	}
	var expected time.Duration
	for _, e := range sel {
		l.running = e
		expected += time.Duration(float64(e.seedTime)*l.scale()) * time.Duration(len(runs(e)))
	}
	l.progress.begin(expected)
	defer l.progress.end()
	l.noise = scenario.StartNoise(time.Millisecond)
	defer l.noise.Stop()
	for i, e := range sel {
		l.running = e
		for _, p := range runs(e) {
			if err := l.ctx.Err(); err != nil {
				return err
			}
			l.progress.show(strings.TrimSpace(fmt.Sprintf("[%d/%d] %s %s", i+1, len(sel), e.id, p)))
			l.noise.Take() // from here on: this run's
			if err := e.run(l, p); err != nil {
				return fmt.Errorf("%s %s: %w", e.id, p, err)
			}
		}
	}
	return nil
}

// progress is a single line on a terminal, rewritten in place as the run
// goes (what runs, the time elapsed and the time expected); nothing at all
// when the output is not a terminal, nor once halted.
type progress struct {
	w        io.Writer
	start    time.Time
	expected time.Duration
	stop     chan struct{}
	done     chan struct{}

	mu   sync.Mutex
	on   bool // guarded by mu
	what string
	last int
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, start: time.Now()}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.on = true
		}
	}
	return p
}

// begin starts rewriting the line each second, with expected as the run's
// expected length (0: unknown); end stops it.
func (p *progress) begin(expected time.Duration) {
	p.mu.Lock()
	on := p.on
	p.mu.Unlock()
	if !on {
		return
	}
	p.start, p.expected = time.Now(), expected
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
				p.draw()
			}
		}
	}()
}

func (p *progress) end() {
	if p.stop != nil {
		close(p.stop)
		<-p.done
		p.stop = nil
	}
	p.clear()
}

func (p *progress) show(what string) {
	p.mu.Lock()
	p.what = what
	p.mu.Unlock()
	p.draw()
}

func (p *progress) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on {
		return
	}
	line := fmt.Sprintf("%s  %.0f s", p.what, time.Since(p.start).Seconds())
	if p.expected > 0 {
		line += fmt.Sprintf(" of about %.0f s", p.expected.Seconds())
	}
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", max(0, p.last-len(line))))
	p.last = len(line)
}

func (p *progress) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
}

// halt clears the line for good.
func (p *progress) halt() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	p.on = false
}

func (p *progress) clearLocked() {
	if p.on && p.last > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.last))
		p.last = 0
	}
}
