package scenario

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Server is a simulated downstream: Workers serve requests one at a time
// each, from a FIFO queue of at most Queue waiting requests; an arrival
// that finds the queue full is refused at once. Service times are
// lognormal, with the given median and 99th percentile. Faults change with
// time. A Server is a description; Start runs one.
type Server struct {
	Workers int           // requests served at once
	Queue   int           // requests waiting at most
	Median  time.Duration // service time: median
	P99     time.Duration // service time: 99th percentile (> Median)
	// Deaf servers do not notice that a caller gave up: a request that
	// waited in the queue past its caller's deadline is still served, and
	// a request in service runs to its end. Such work is counted as wasted.
	Deaf bool
	// ErrorCost, if not 0, is how long a request answered with an error
	// (Fault.Errors) holds its worker, instead of its service time: 0 is
	// a server that fails at the end of its work (the protection
	// benchmark's model), a few milliseconds one that fails fast (a
	// validation or a dependency's refusal).
	ErrorCost time.Duration
	// Fault is the fault at a time since the server started (nil: none).
	Fault func(at time.Duration) Fault `json:"-"`
	Seed  uint64
}

// Fault is the state of a simulated downstream at one moment. The zero
// Fault is a healthy downstream.
type Fault struct {
	Down     bool    // every request is refused at once: a hard outage
	Errors   float64 // the share of requests answered with an error after their service time
	Hang     float64 // the share of requests whose answer never comes (it takes no worker)
	Capacity float64 // the share of capacity left, in (0, 1]; 0 means 1 (healthy)
	// Slow is the share of requests whose service time is SlowBy times
	// what it would be: a tail of stragglers (hedging's case).
	Slow   float64
	SlowBy float64
	// Delay is added to every answer on its way back to the caller (a
	// network's latency): the worker is free once it has served the
	// request, and the caller waits Delay more. A refusal comes back as
	// late.
	Delay time.Duration
	// Late is the share of answers that come later still, by a time drawn
	// uniformly in [LateMin, LateMax], their workers free as with Delay: a
	// second mode of latency.
	Late             float64
	LateMin, LateMax time.Duration
	// Stall is how much longer the caller's own host is stalled (not
	// scheduled): an answer that arrives now is seen only then. The
	// downstream is not at fault; the caller's timers (its deadline, a
	// stack's timeouts) still fire on time.
	Stall time.Duration
}

// The errors of a simulated downstream. All are worth retrying.
var (
	ErrDown       = errors.New("scenario: downstream down")
	ErrOverloaded = errors.New("scenario: downstream queue full")
	ErrFailed     = errors.New("scenario: downstream failed")
)

// MeanService is the mean service time of a healthy server: the lognormal's
// median × exp(σ²/2).
func (s Server) MeanService() time.Duration {
	return time.Duration(float64(s.Median) * math.Exp(s.sigma()*s.sigma()/2))
}

// Capacity is the requests a healthy server completes per second, at most:
// Workers / MeanService.
func (s Server) Capacity() float64 { return float64(s.Workers) / s.MeanService().Seconds() }

func (s Server) sigma() float64 {
	return math.Log(float64(s.P99)/float64(s.Median)) / 2.3263478740408408 // z of 0.99
}

// Sim is a running simulated server. It is safe for concurrent use.
type Sim struct {
	s     Server
	sigma float64
	start time.Time
	queue chan *job
	stop  chan struct{}
	wg    sync.WaitGroup

	mu       sync.Mutex
	rng      *rand.Rand
	stats    Stats
	qsamples float64       // sum of queue lengths seen at arrivals
	queueBy  []QueueSecond // the same, by second since the start
}

// Record is what a simulated server did over a run: its counts, and the
// queue lengths its arrivals found, by second since it started. A server
// in another process sends its Record back when it ends (ServeProcess).
type Record struct {
	Stats   Stats
	QueueBy []QueueSecond
}

// QueueSecond is the queue lengths that the arrivals of one second found:
// their sum, their number and the most.
type QueueSecond struct {
	Sum  float64
	N    int
	Most int
}

// Stats counts what a simulated server did.
type Stats struct {
	Received int           // requests that arrived
	Refused  int           // refused at once: down, or the queue full
	Hung     int           // answers that never came
	Served   int           // requests that took a worker
	Answered int           // answers delivered to a caller still waiting
	Wasted   time.Duration // worker time spent on requests whose caller had given up
	QueueMax int           // the most requests waiting at an arrival
}

type job struct {
	ctx  context.Context
	done chan error // buffered
	draw float64    // decides the error
	d    time.Duration
}

// Start runs the server: its workers are goroutines, so start it inside a
// testing/synctest bubble to run it in virtual time. Stop ends it.
func (s Server) Start() *Sim {
	m := &Sim{
		s: s, sigma: s.sigma(), start: time.Now(),
		queue: make(chan *job, max(s.Queue, 0)),
		stop:  make(chan struct{}),
		rng:   rand.New(rand.NewPCG(s.Seed, 0x5eed)),
	}
	for range s.Workers {
		m.wg.Add(1)
		go m.work()
	}
	return m
}

// Stop ends the workers and waits for them; requests still queued are
// dropped.
func (m *Sim) Stop() {
	close(m.stop)
	m.wg.Wait()
}

// Stats returns what the server has done so far.
func (m *Sim) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// MeanQueue is the mean queue length that arrivals found.
func (m *Sim) MeanQueue() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stats.Received == 0 {
		return 0
	}
	return m.qsamples / float64(m.stats.Received)
}

// Record returns what the server has done so far.
func (m *Sim) Record() Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Record{Stats: m.stats, QueueBy: slices.Clone(m.queueBy)}
}

// queueIn returns the mean and the most of the queue lengths that arrivals
// found in [from, to).
func (r Record) queueIn(from, to time.Duration) (mean float64, most int) {
	var sum float64
	n := 0
	for sec := int(from / time.Second); sec < int(to/time.Second) && sec < len(r.QueueBy); sec++ {
		b := r.QueueBy[sec]
		sum, n, most = sum+b.Sum, n+b.N, max(most, b.Most)
	}
	if n == 0 {
		return 0, most
	}
	return sum / float64(n), most
}

// fault is the fault now.
func (m *Sim) fault() Fault {
	if m.s.Fault == nil {
		return Fault{}
	}
	return m.s.Fault(time.Since(m.start))
}

// Call is one request to the server, waiting for its answer or for ctx.
func (m *Sim) Call(ctx context.Context) error {
	f := m.fault()
	m.mu.Lock()
	m.stats.Received++
	q := len(m.queue)
	m.qsamples += float64(q)
	m.stats.QueueMax = max(m.stats.QueueMax, q)
	sec := int(time.Since(m.start) / time.Second)
	for len(m.queueBy) <= sec {
		m.queueBy = append(m.queueBy, QueueSecond{})
	}
	b := &m.queueBy[sec]
	b.Sum, b.N, b.Most = b.Sum+float64(q), b.N+1, max(b.Most, q)
	hang, draw, z := m.rng.Float64(), m.rng.Float64(), m.rng.NormFloat64()
	back := f.Delay                             // the answer's way back
	if f.Late > 0 && m.rng.Float64() < f.Late { // drawn only then: other scenarios keep their sequences
		back += f.LateMin + time.Duration(m.rng.Float64()*float64(f.LateMax-f.LateMin))
	}
	switch {
	case f.Down:
		m.stats.Refused++
		m.mu.Unlock()
		return m.arrive(ctx, back, ErrDown)
	case hang < f.Hang:
		m.stats.Hung++
		m.mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}
	d := time.Duration(float64(m.s.Median) * math.Exp(m.sigma*z))
	if f.Slow > 0 && m.rng.Float64() < f.Slow { // drawn only then: other scenarios keep their sequences
		d = time.Duration(float64(d) * f.SlowBy)
	}
	m.mu.Unlock()
	j := &job{ctx: ctx, done: make(chan error, 1), draw: draw, d: d}
	select {
	case m.queue <- j:
	default:
		m.mu.Lock()
		m.stats.Refused++
		m.mu.Unlock()
		return m.arrive(ctx, back, ErrOverloaded)
	}
	select {
	case err := <-j.done:
		return m.arrive(ctx, back, err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// arrive brings an answer back to its caller: after back (the fault's
// Delay and lateness, drawn when the request came), and, if the caller's
// host is stalled when it arrives, once the stall ends. The caller may
// give up on the way.
func (m *Sim) arrive(ctx context.Context, back time.Duration, err error) error {
	if back > 0 && !wait(ctx, back) {
		return ctx.Err()
	}
	if s := m.fault().Stall; s > 0 && !wait(ctx, s) {
		return ctx.Err()
	}
	return err
}

// wait waits d, or until ctx ends: false then.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (m *Sim) work() {
	defer m.wg.Done()
	for {
		select {
		case <-m.stop:
			return
		case j := <-m.queue:
			m.serve(j)
		}
	}
}

// serve runs one request on this worker.
func (m *Sim) serve(j *job) {
	if !m.s.Deaf && j.ctx.Err() != nil {
		return // its caller gave up while it waited: skipped
	}
	f := m.fault()
	d := j.d
	if m.s.ErrorCost > 0 && j.draw < f.Errors {
		d = m.s.ErrorCost
	}
	if f.Capacity > 0 && f.Capacity < 1 {
		d = time.Duration(float64(d) / f.Capacity)
	}
	t := time.NewTimer(d)
	worked := d
	if m.s.Deaf {
		select {
		case <-t.C:
		case <-m.stop:
			t.Stop()
			return
		}
	} else {
		start := time.Now()
		select {
		case <-t.C:
		case <-j.ctx.Done():
			t.Stop()
			worked = time.Since(start)
		case <-m.stop:
			t.Stop()
			return
		}
	}
	var err error
	if j.draw < f.Errors {
		err = ErrFailed
	}
	m.mu.Lock()
	m.stats.Served++
	if j.ctx.Err() != nil {
		m.stats.Wasted += worked
	} else {
		m.stats.Answered++
	}
	m.mu.Unlock()
	j.done <- err
}
