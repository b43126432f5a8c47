package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// BenchmarkScopeFanout measures partial sync's fan-out on one node: 1,000
// subscriptions over 100 scope values (10 follow each value), each reading
// the log as the live feed does (session.feed, without the websocket); each
// op commits one write to one value and waits until its 10 followers read
// it. deliveries/write is the entries subscriptions received per write (10
// is exact delivery); reads/write is the pages subscriptions read per
// write: the feed router (route.go) wakes only the subscriptions a commit
// concerns, so it equals deliveries/write (10, where every subscription
// woke at every commit before routing: 1,000). The every_value run is
// the ceiling: the same subscriptions following every value, each write
// delivered to all 1,000; fanout_ms of both runs side by side is the ratio.
func BenchmarkScopeFanout(b *testing.B) {
	const subscriptions, values = 1000, 100
	for _, everyValue := range []bool{false, true} {
		name := "per_value"
		if everyValue {
			name = "every_value"
		}
		b.Run(name, func(b *testing.B) {
			srv := bareServer(b, func(c *Config) {
				c.Scopes = &replication.Scopes{}
				require.NoError(b, c.Scopes.Set("project=tasks.project_id"))
			})
			p := auth.Principal{Tenant: "t1", ClientID: "dev", Read: []string{auth.Wildcard}, Write: []string{auth.Wildcard},
				Scopes: map[string][]string{"project": {syncproto.AllValues}}}
			ctx, cancel := context.WithCancel(context.Background())
			var subs sync.WaitGroup
			defer func() {
				cancel()
				subs.Wait()
			}()
			seen := make([]chan struct{}, values)
			for v := range seen {
				seen[v] = make(chan struct{}, subscriptions)
			}
			var reads atomic.Int64
			var started sync.WaitGroup
			for i := range subscriptions {
				v := i % values
				scope := scopeOf(p)
				scope.Scopes, scope.Follow = srv.cfg.Scopes, syncproto.ScopeSet{"project": {fmt.Sprint("p", v)}}
				if everyValue {
					v, scope.Follow = 0, syncproto.ScopeSet{"project": {syncproto.AllValues}}
				}
				subs.Add(1)
				started.Add(1)
				go func() {
					defer subs.Done()
					tailSubscriber(ctx, srv, scope, started.Done, seen[v], &reads)
				}()
			}
			started.Wait()
			clock := syncproto.NewClock("dev", nil)
			var fanout time.Duration
			delivered := 0
			reads.Store(0)
			b.ResetTimer()
			for i := range b.N {
				v := i % values
				op, err := syncproto.NewOpID()
				require.NoError(b, err)
				value := fmt.Sprintf(`{"project_id":"p%d"}`, v)
				req, err := srv.push(ctx, p, []syncproto.Mutation{{OpID: op, Model: "tasks", Key: fmt.Sprint("k", i), Op: syncproto.OpPut, Value: []byte(value), HLC: clock.Now()}}, map[string]bool{})
				require.NoError(b, err)
				<-req.done
				require.NoError(b, req.err)
				start := time.Now()
				want, ch := subscriptions/values, seen[v]
				if everyValue {
					want, ch = subscriptions, seen[0]
				}
				for range want {
					select {
					case <-ch:
					case <-time.After(time.Minute):
						b.Fatal("a subscription did not read the write within a minute")
					}
				}
				delivered += want
				fanout += time.Since(start)
			}
			b.StopTimer()
			// Nothing reached a subscription of another value.
			for _, ch := range seen {
				require.Empty(b, ch)
			}
			b.ReportMetric(float64(delivered)/float64(b.N), "deliveries/write")
			b.ReportMetric(float64(reads.Load())/float64(b.N), "reads/write")
			b.ReportMetric(float64(fanout.Microseconds())/1000/float64(b.N), "fanout_ms")
		})
	}
}
