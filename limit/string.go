package limit

import "fmt"

// String describes the limiter, e.g. "limit(Gradient2(…), limit 20 in
// [1, 200], queue 0)".
func (l *Limiter) String() string {
	return fmt.Sprintf("limit(%v, limit %d in [%d, %d]%s)", l.s.Algorithm, l.Limit(), l.s.MinLimit, l.s.MaxLimit, queue(l.s.MaxQueue, l.s.MaxWait.String()))
}

// String describes the bulkhead, e.g. "bulkhead(10 at once, queue 20 for
// at most 50ms)".
func (b *Bulkhead) String() string {
	return fmt.Sprintf("bulkhead(%d at once%s)", b.s.MaxConcurrent, queue(b.s.MaxQueue, b.s.MaxWait.String()))
}

func queue(n int, wait string) string {
	switch {
	case n == 0:
		return ", no queue"
	case wait == "0s":
		return fmt.Sprintf(", queue %d", n)
	}
	return fmt.Sprintf(", queue %d for at most %s", n, wait)
}
