package scenario

import (
	"slices"
	"sync"
	"time"
)

// Noise is the scheduling noise of a stretch of real time: how late a bare
// timer woke up, sampled over and over while an experiment ran beside it.
// A real-time experiment's instants are late by about as much (a timer, a
// goroutine woken, a socket read), never early.
type Noise struct {
	Period  time.Duration // the timer each sample waited for
	Samples int           // how many wake-ups were measured
	P50     time.Duration // the median lateness
	P99     time.Duration
	Max     time.Duration // the worst lateness
}

// NoiseProbe measures scheduling noise: a goroutine that waits for a timer
// of Period, again and again, and records how late each wake-up was. Start
// it with [StartNoise]; [NoiseProbe.Take] reads what it measured; Stop ends
// it. It is safe for concurrent use.
type NoiseProbe struct {
	period time.Duration
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once // closes stop

	mu   sync.Mutex
	late []time.Duration // guarded by mu: since the last Take
}

// StartNoise starts a probe that waits for timers of period (1 ms if 0 or
// less).
func StartNoise(period time.Duration) *NoiseProbe {
	if period <= 0 {
		period = time.Millisecond
	}
	p := &NoiseProbe{period: period, stop: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

func (p *NoiseProbe) loop() {
	defer close(p.done)
	t := time.NewTimer(p.period)
	defer t.Stop()
	armed := time.Now()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			// Late by the timer's own delay and by the time this goroutine
			// waited to run after it: both are the machine's.
			late := max(time.Since(armed)-p.period, 0)
			p.mu.Lock()
			p.late = append(p.late, late)
			p.mu.Unlock()
			armed = time.Now()
			t.Reset(p.period)
		}
	}
}

// Take returns the noise measured since the probe started or since the
// last Take, and starts over.
func (p *NoiseProbe) Take() Noise {
	p.mu.Lock()
	late := p.late
	p.late = nil
	p.mu.Unlock()
	return summarize(p.period, late)
}

// Stop ends the probe and returns what it measured since the last Take.
// Calling it again returns a Noise with no samples.
func (p *NoiseProbe) Stop() Noise {
	p.once.Do(func() { close(p.stop) })
	<-p.done
	return p.Take()
}

// summarize is the noise of the latenesses late (reordered in place).
func summarize(period time.Duration, late []time.Duration) Noise {
	n := Noise{Period: period, Samples: len(late)}
	if len(late) == 0 {
		return n
	}
	slices.Sort(late)
	n.P50, n.P99, n.Max = quantile(late, 0.5), quantile(late, 0.99), late[len(late)-1]
	return n
}
