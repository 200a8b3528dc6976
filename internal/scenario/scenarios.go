package scenario

import (
	"slices"
	"time"
)

// The model of the protection benchmark: a downstream of 10 workers with
// lognormal service times (p50 20 ms, p99 200 ms: a mean of 32.6 ms, so a
// capacity of about 307 requests a second), a queue of 50, deaf to
// callers that gave up. Scenarios warm up healthy for 20 s, then the fault
// starts; each is measured for 60 s from the fault's start.
var Model = Server{Workers: 10, Queue: 50, Median: 20 * time.Millisecond, P99: 200 * time.Millisecond, Deaf: true}

const (
	warmUp  = 20 * time.Second
	horizon = 60 * time.Second
)

// Scenarios are the faults of the protection benchmark: the downstream's
// failures, then its slowdowns.
var Scenarios = slices.Concat(Failures, Slowdowns)

// Failures are the faults where the downstream refuses, hangs, fails or
// loses capacity.
var Failures = []Scenario{
	{
		Name:  "outage", // every request refused at once for 30 s
		About: "every request refused at once",
		Fault: func(time.Duration) Fault { return Fault{Down: true} },
		Start: warmUp, Length: 30 * time.Second, Horizon: horizon, Healed: 30 * time.Second,
	},
	{
		Name:  "blackhole", // every answer hangs for 30 s
		About: "every answer hangs, until its caller gives up",
		Fault: func(time.Duration) Fault { return Fault{Hang: 1} },
		Start: warmUp, Length: 30 * time.Second, Horizon: horizon, Healed: 30 * time.Second,
	},
	{
		Name:  "hang20", // 20 % of the answers hang for 30 s
		About: "20 % of the answers hang, until their caller gives up; the others are served as usual",
		Fault: func(time.Duration) Fault { return Fault{Hang: 0.2} },
		Start: warmUp, Length: 30 * time.Second, Horizon: horizon, Healed: 30 * time.Second,
	},
	{
		Name:  "capacity30-shallow", // 30 % of the capacity for 30 s, a queue of 10
		About: "the downstream serves at 30 % of its capacity (each answer takes 3.3 × as long), with a queue of 10: the excess is refused at once",
		Fault: func(time.Duration) Fault { return Fault{Capacity: 0.3} },
		Start: warmUp, Length: 30 * time.Second, Horizon: horizon, Healed: 30 * time.Second,
		Queue: 10,
	},
	{
		Name:  "capacity30-deep", // the same with a queue of 1000: the metastability probe
		About: "the same with a queue of 1000: requests wait there past their callers' deadlines (the metastability probe)",
		Fault: func(time.Duration) Fault { return Fault{Capacity: 0.3} },
		Start: warmUp, Length: 30 * time.Second, Horizon: horizon, Healed: 30 * time.Second,
		Queue: 1000,
	},
	{
		Name:  "ramp", // down for 10 s, then errors falling from 100 % to 0 over 20 s
		About: "down for the fault's first third (10 s), then errors falling from 100 % to none over the rest (20 s)",
		Fault: func(since time.Duration) Fault {
			if since < 10*time.Second {
				return Fault{Down: true}
			}
			return Fault{Errors: 1 - float64(since-10*time.Second)/float64(20*time.Second)}
		},
		Start: warmUp, Length: 30 * time.Second, Horizon: horizon,
		Healed: 29 * time.Second, // errors at 5 % and below
	},
	{
		Name:  "flapping", // down 5 s, up 5 s, four times
		About: "down and up in turns of a seventh of the fault each (5 s): four downs",
		Fault: func(since time.Duration) Fault {
			return Fault{Down: since%(10*time.Second) < 5*time.Second}
		},
		Start: warmUp, Length: 35 * time.Second, Horizon: horizon, Healed: 35 * time.Second,
	},
}

// Slowdowns are the faults where the downstream gets slower and stays
// healthy: its capacity intact, every answer coming, only later (a slower
// network, a second mode of latency), or the callers' own host stalling.
// A plain client with the callers' deadline loses almost nothing in them;
// a resilience stack must not lose more.
var Slowdowns = []Scenario{
	{
		Name:  "delay100", // every answer 100 ms later for 30 s
		About: "every answer comes 100 ms later (5 × the healthy p50), the workers free: a slower network",
		Fault: func(time.Duration) Fault { return Fault{Delay: 100 * time.Millisecond} },
		Start: warmUp, Length: 30 * time.Second, Horizon: horizon, Healed: 30 * time.Second,
	},
	{
		Name:  "delay200", // every answer 200 ms later for 30 s
		About: "every answer comes 200 ms later (10 × the healthy p50), the workers free",
		Fault: func(time.Duration) Fault { return Fault{Delay: 200 * time.Millisecond} },
		Start: warmUp, Length: 30 * time.Second, Horizon: horizon, Healed: 30 * time.Second,
	},
	{
		Name:  "delay-ramp", // the delay growing by 10 ms a second to 300 ms over 30 s, then gone
		About: "the answers' delay grows by 10 ms a second, from 10 ms to 300 ms over the fault (30 s), the workers free, then drops back to none",
		Fault: func(since time.Duration) Fault {
			return Fault{Delay: 10 * time.Millisecond * (1 + since/time.Second)}
		},
		Start: warmUp, Length: 30 * time.Second, Horizon: horizon, Healed: 30 * time.Second,
	},
	{
		Name:  "bimodal10", // 10 % of the answers 500-800 ms later for 30 s
		About: "10 % of the answers come 500 to 800 ms later, the rest as usual, the workers free",
		Fault: func(time.Duration) Fault {
			return Fault{Late: 0.1, LateMin: 500 * time.Millisecond, LateMax: 800 * time.Millisecond}
		},
		Start: warmUp, Length: 30 * time.Second, Horizon: horizon, Healed: 30 * time.Second,
	},
	{
		Name:  "client-stall", // the callers' host stalls every 2 s for 200-300 ms, 30 s
		About: "the callers' own host stalls every 2 s, for 200, 250 and 300 ms in turn: an answer that arrives in a stall is seen at its end; the downstream is healthy",
		Fault: func(since time.Duration) Fault {
			const every = 2 * time.Second
			length := 200*time.Millisecond + 50*time.Millisecond*time.Duration(since/every%3)
			if in := since % every; in < length {
				return Fault{Stall: length - in}
			}
			return Fault{}
		},
		Start: warmUp, Length: 30 * time.Second, Horizon: horizon, Healed: 30 * time.Second,
	},
}

// Loads are the loads of the protection benchmark: an open loop at 60 % of
// the model's capacity, and a closed loop of 20 callers; each request has
// a 1 s deadline.
var Loads = []Load{
	{Name: "open60", Rate: 0.6 * Model.Capacity(), Deadline: time.Second},
	{Name: "closed20", Callers: 20, Pace: 100 * time.Millisecond, Deadline: time.Second},
}

// TailServer is the downstream of the tail scenario: 20 workers, lognormal
// service times with p50 5 ms and p99 20 ms, a queue of 100; it stops
// working on a request whose caller gave up (a hedge's loser frees its
// worker).
var TailServer = Server{Workers: 20, Queue: 100, Median: 5 * time.Millisecond, P99: 20 * time.Millisecond}

// Straggle is hedging's scenario ("The Tail at Scale"): after a healthy
// warm-up, 1 % of the requests take 100 times as long, for 60 s.
var Straggle = Scenario{
	Name:  "tail", // 1 % of the requests 100× slow
	Fault: func(time.Duration) Fault { return Fault{Slow: 0.01, SlowBy: 100} },
	Start: warmUp, Length: horizon, Horizon: horizon, Healed: 0,
}

// TailLoad is the tail scenario's load: an open loop at 25 % of the
// healthy capacity (the stragglers take as much worker time again as all
// the other requests), each request with a 5 s deadline.
var TailLoad = Load{Name: "open25", Rate: 0.25 * TailServer.Capacity(), Deadline: 5 * time.Second}
