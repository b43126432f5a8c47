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

// BenchmarkFeedTailFanout measures the shared feed tail's side of fan-out:
// n subscriptions wait for the log as the live feed does; each op commits
// one write and waits until every subscription has read it from the tail.
// fanout_ms is the mean time from the commit's end to the last
// subscription's page (the commit's fsync left out); the websocket writes
// are not part of it.
func BenchmarkFeedTailFanout(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("subscriptions=%d", n), func(b *testing.B) {
			srv := bareServer(b)
			p := auth.Principal{Tenant: "t1", ClientID: "dev", Read: []string{auth.Wildcard}, Write: []string{auth.Wildcard}}
			ctx, cancel := context.WithCancel(context.Background())
			var subs sync.WaitGroup
			defer func() {
				cancel()
				subs.Wait()
			}()
			seen := make(chan struct{}, n)
			var started sync.WaitGroup
			for range n {
				subs.Add(1)
				started.Add(1)
				go func() {
					defer subs.Done()
					tailSubscriber(ctx, srv, scopeOf(p), started.Done, seen, nil)
				}()
			}
			started.Wait()
			clock := syncproto.NewClock("dev", nil)
			var fanout time.Duration
			b.ResetTimer()
			for i := range b.N {
				op, err := syncproto.NewOpID()
				require.NoError(b, err)
				req, err := srv.push(ctx, p, []syncproto.Mutation{{OpID: op, Model: "m", Key: fmt.Sprint("k", i), Op: syncproto.OpPut, Value: []byte(`{"v":1}`), HLC: clock.Now()}}, map[string]bool{})
				require.NoError(b, err)
				<-req.done
				require.NoError(b, req.err)
				start := time.Now()
				for range n {
					select {
					case <-seen:
					case <-time.After(time.Minute):
						b.Fatal("a subscription did not read the write within a minute")
					}
				}
				fanout += time.Since(start)
			}
			b.ReportMetric(float64(fanout.Microseconds())/1000/float64(b.N), "fanout_ms")
		})
	}
}

// tailSubscriber follows the log from its head as the live feed does
// (session.feed, without the websocket: registered with the feed router
// before its first read, woken only by entries routed to it), sending on
// seen for each entry read, until ctx ends. It calls started once it holds
// its cursor, and counts each page it reads in reads (when not nil).
func tailSubscriber(ctx context.Context, srv *Server, scope replication.Scope, started func(), seen chan<- struct{}, reads *atomic.Int64) {
	route := srv.tail.router.subscribe(scope)
	defer route.close()
	b, err := srv.store.Log.Bounds(ctx, scope)
	started()
	if err != nil {
		return
	}
	cursor := b.Head
	for ctx.Err() == nil {
		req := replication.ReadRequest{After: cursor, Scope: scope, Limit: syncproto.DefaultPullLimit, MaxBytes: feedPageBytes}
		if reads != nil {
			reads.Add(1)
		}
		page, ok := srv.tail.read(ctx, req)
		if !ok {
			if page, err = srv.store.Log.Read(ctx, req); err != nil {
				return
			}
		}
		for range page.Entries {
			select {
			case seen <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		cursor = page.Next
		if page.CaughtUp() {
			if cursor, ok = route.wait(ctx, cursor); !ok {
				return
			}
		}
	}
}
