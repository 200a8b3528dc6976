package etcd_test

import (
	"context"
	"testing"

	"github.com/callguard/callguard/grpcmw"
	"github.com/callguard/callguard/preset"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkHealthy: a Get and a Put on a healthy etcd, through clientv3
// alone and with the documented chain beneath it (MaxUnaryRetries: 1 in
// both). The difference is what the chain costs a healthy call, over a
// real loopback round trip and etcd's own work (a Put waits for its
// fsync).
//
//	cd interop/etcd && go test -run '^$' -bench Healthy -count 6 | benchstat -col /chain -
func BenchmarkHealthy(b *testing.B) {
	e := startEtcd(b)
	for _, chain := range []struct {
		name string
		ic   func() *grpcmw.Interceptors
	}{
		{"none", func() *grpcmw.Interceptors { return nil }},
		{"documented", func() *grpcmw.Interceptors { return documented(b, preset.Settings{}) }},
	} {
		cli, _ := client(b, e, chain.ic(), 1)
		put(b, cli, "k", "v")
		for _, op := range []struct {
			name string
			do   func(context.Context, *clientv3.Client) error
		}{
			{"Get", func(ctx context.Context, c *clientv3.Client) error { _, err := c.Get(ctx, "k"); return err }},
			{"Put", func(ctx context.Context, c *clientv3.Client) error { _, err := c.Put(ctx, "k", "v"); return err }},
		} {
			b.Run("op="+op.name+"/chain="+chain.name, func(b *testing.B) {
				ctx := context.Background()
				for b.Loop() {
					if err := op.do(ctx, cli); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
