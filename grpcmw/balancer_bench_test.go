package grpcmw

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/callguard/callguard/endpoint"
	"google.golang.org/grpc/balancer"
)

type benchSC struct{ balancer.SubConn }

// rrPicker is round_robin's picker as grpc-go's is: a turn over the
// READY SubConns.
type rrPicker struct {
	scs  []balancer.SubConn
	turn atomic.Uint32
}

func (p *rrPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{SubConn: p.scs[int(p.turn.Add(1))%len(p.scs)]}, nil
}

// BenchmarkPick is one pick and its Done on a channel of ten endpoints,
// all healthy: round_robin's picker alone (impl=round_robin) and with the
// endpoints' breakers before it (impl=callguard_endpoints). Compare with
//
//	benchstat -col /impl out.txt
func BenchmarkPick(b *testing.B) {
	set, err := endpoint.NewSet("bench", endpoint.Settings{})
	if err != nil {
		b.Fatal(err)
	}
	rr := &rrPicker{}
	p := &lbPicker{child: rr, set: set, eps: map[balancer.SubConn]*endpoint.Endpoint{}}
	var addrs []string
	for i := range 10 {
		addrs = append(addrs, fmt.Sprintf("10.0.0.%d:443", i))
	}
	set.Update(addrs)
	for i, a := range addrs {
		sc := &benchSC{}
		rr.scs = append(rr.scs, sc)
		p.eps[sc] = set.Endpoint(a)
		p.ready = append(p.ready, readySub{sc, p.eps[sc]})
		_ = i
	}
	info := balancer.PickInfo{FullMethodName: "/grpc.health.v1.Health/Check", Ctx: context.Background()}
	for _, impl := range []struct {
		name string
		p    balancer.Picker
	}{{"round_robin", rr}, {"callguard_endpoints", p}} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := impl.p.Pick(info)
				if err != nil {
					b.Fatal(err)
				}
				if res.Done != nil {
					res.Done(balancer.DoneInfo{BytesSent: true, BytesReceived: true})
				}
			}
		})
	}
}
