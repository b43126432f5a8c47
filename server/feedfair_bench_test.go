package server_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// feedLoad is tenant A's side of the feed's fairness figure: subscribers
// sessions subscribed to A's feed, reading every frame, and pushers
// sessions each pushing batches of feedLoadBatch mutations, paced to rate
// mutations a second in all (closed loop: a push waits for its answer, so
// a server that cannot keep up lowers the rate).
type feedLoad struct {
	subs, pushers []*wsClient
	mutations     atomic.Int64 // applied
	deliveries    atomic.Int64 // entries A's subscribers received
	wg            sync.WaitGroup
	errs          chan error
}

const (
	feedLoadBatch   = 10
	feedLoadPushers = 4
)

// startFeedLoad opens A's sessions and subscriptions (on the test
// goroutine) and starts its readers and pushers, which stop when ctx ends
// or after maxPushes pushes each.
func startFeedLoad(b *testing.B, ctx context.Context, ts *testServer, tenant string, subscribers int, rate float64, maxPushes int) *feedLoad {
	b.Helper()
	l := &feedLoad{errs: make(chan error, subscribers+feedLoadPushers)}
	for i := range subscribers {
		id := fmt.Sprintf("sub%d", i)
		c, _ := session(b, ts, ts.Member(b, tenant, id), id)
		c.subscribe("s", 0)
		l.subs = append(l.subs, c)
	}
	for _, c := range l.subs {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				_, frame, err := c.conn.Read(ctx)
				if err != nil {
					if ctx.Err() == nil {
						l.errs <- fmt.Errorf("subscriber: %w", err)
					}
					return
				}
				msg, err := syncproto.Decode(frame)
				if err != nil {
					l.errs <- err
					return
				}
				if ch, ok := msg.(*syncproto.Changes); ok {
					l.deliveries.Add(int64(len(ch.Entries)))
				}
			}
		}()
	}
	every := time.Duration(float64(time.Second) * feedLoadBatch * feedLoadPushers / rate)
	for i := range feedLoadPushers {
		id := fmt.Sprintf("pusher%d", i)
		c, _ := session(b, ts, ts.Member(b, tenant, id), id)
		l.pushers = append(l.pushers, c)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			if err := l.push(ctx, c, id, every, maxPushes); err != nil {
				l.errs <- err
			}
		}()
	}
	return l
}

// push pushes a batch every every (or as soon as the previous one was
// answered, when later); it uses no require (not the test goroutine).
func (l *feedLoad) push(ctx context.Context, c *wsClient, clientID string, every time.Duration, maxPushes int) error {
	clock := syncproto.NewClock(clientID, nil)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for p := 0; p < maxPushes; p++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil
		}
		id, frame, err := syncdtest.LoadPush(clock, clientID, p, feedLoadBatch)
		if err != nil {
			return err
		}
		if err := c.conn.Write(ctx, websocket.MessageText, frame); err != nil {
			return ignoreEnded(ctx, err)
		}
		_, answer, err := c.conn.Read(ctx)
		if err != nil {
			return ignoreEnded(ctx, err)
		}
		msg, err := syncproto.Decode(answer)
		if err != nil {
			return err
		}
		if pr, ok := msg.(*syncproto.PushResult); !ok || pr.ID != id {
			return fmt.Errorf("%s: want the push_result of %s, got %s", clientID, id, answer)
		}
		l.mutations.Add(feedLoadBatch)
	}
	return nil
}

// ignoreEnded is nil when ctx ended (the load was stopped), else err.
func ignoreEnded(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// stop ends the load and returns its first error.
func (l *feedLoad) stop(cancel context.CancelFunc) error {
	cancel()
	for _, c := range append(l.subs, l.pushers...) {
		c.conn.CloseNow()
	}
	l.wg.Wait()
	select {
	case err := <-l.errs:
		return err
	default:
		return nil
	}
}

// feedDeliveries has tenant's one device write n records in sequence, each
// awaited, while its subscriber (another session of the tenant) reads the
// feed, and returns each write's delivery latency: from sending the push
// to the subscriber receiving its entry, and its acknowledgement latency
// (push sent to its answer). The next write is sent once the previous one
// was delivered.
func feedDeliveries(b *testing.B, ts *testServer, tenant string, n int) (delivery, ack []time.Duration) {
	b.Helper()
	sub, _ := session(b, ts, ts.Member(b, tenant, "subscriber"), "subscriber")
	sub.subscribe("s", 0)
	writer, clock := session(b, ts, ts.Member(b, tenant, "writer"), "writer")
	delivered := make(chan string, n)
	go func() {
		defer close(delivered)
		for {
			frame, err := sub.next()
			if err != nil {
				return
			}
			msg, err := syncproto.Decode(frame)
			if err != nil {
				return
			}
			if ch, ok := msg.(*syncproto.Changes); ok {
				for _, e := range ch.Entries {
					delivered <- e.Key
				}
			}
		}
	}()
	delivery, ack = make([]time.Duration, n), make([]time.Duration, n)
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		start := time.Now()
		requireApplied(b, writer.push(fmt.Sprintf("w%d", i), put(b, clock, "notes", key, `{"n":1}`)))
		ack[i] = time.Since(start)
		select {
		case got, ok := <-delivered:
			require.True(b, ok, "the subscriber's feed ended")
			require.Equal(b, key, got)
		case <-time.After(ioTimeout):
			b.Fatalf("%s was never delivered", key)
		}
		delivery[i] = time.Since(start)
	}
	sub.conn.CloseNow()
	writer.conn.CloseNow()
	return delivery, ack
}

// BenchmarkFeedFairness is the feed's fairness figure: tenant B's one
// device writes 300 records in sequence, each awaited, and its subscriber
// (a second session of B) receives each one; B's delivery latency (push
// sent to entry received) alone, then while tenant A's
// SYNCD_BENCH_FEED_RATE mutations a second (600 by default; 4 pushers,
// batches of 10, closed loop) are delivered to SYNCD_BENCH_FEED_SUBS
// subscribers of A (200 by default). Generator and syncd share the
// machine. It reports the medians over b.N rounds of
//
//	b_p50_alone_ms, b_p50_loaded_ms, b_p99_alone_ms, b_p99_loaded_ms
//	b_p99_ratio                   loaded over alone
//	b_ack_p99_alone_ms, b_ack_p99_loaded_ms  B's acknowledgements' p99
//	                              (part of a delivery: the commit's share)
//	b_feed_p99_alone_ms, b_feed_p99_loaded_ms, b_feed_p99_ratio
//	                              p99 of each delivery less its ack (the
//	                              feed's share: routing and sending)
//	a_mut/s, a_deliveries/s       what A's load achieved, from its start
//	                              to the end of B's writes
//
// One op is one round: B alone, then B under A's load.
func BenchmarkFeedFairness(b *testing.B) {
	subscribers := benchSize(b, "SYNCD_BENCH_FEED_SUBS", 200)
	rate := float64(benchSize(b, "SYNCD_BENCH_FEED_RATE", 600))
	const writes = 300
	var p50Alone, p50Loaded, p99Alone, p99Loaded, ackAlone, ackLoaded, feedAlone, feedLoaded, aRate, aDeliveries []float64
	for r := range b.N {
		ts := startServer(b, server.Config{RequestsPerSecond: 1e9, RequestBurst: 1 << 30, Quotas: noQuotas, RetentionInterval: -1, Synchronous: sqlitedb.Normal})
		lat, ack := feedDeliveries(b, ts, fmt.Sprintf("b-alone-%d", r), writes)
		p50Alone, p99Alone = append(p50Alone, quantileMS(lat, 50)), append(p99Alone, quantileMS(lat, 99))
		ackAlone, feedAlone = append(ackAlone, quantileMS(ack, 99)), append(feedAlone, quantileMS(less(lat, ack), 99))

		ctx, cancel := context.WithCancel(context.Background())
		load := startFeedLoad(b, ctx, ts, "a", subscribers, rate, 1<<20)
		start := time.Now()
		time.Sleep(500 * time.Millisecond) // the load reaches its pace
		lat, ack = feedDeliveries(b, ts, fmt.Sprintf("b-%d", r), writes)
		took := time.Since(start).Seconds()
		aRate = append(aRate, float64(load.mutations.Load())/took)
		aDeliveries = append(aDeliveries, float64(load.deliveries.Load())/took)
		require.NoError(b, load.stop(cancel))
		p50Loaded, p99Loaded = append(p50Loaded, quantileMS(lat, 50)), append(p99Loaded, quantileMS(lat, 99))
		ackLoaded, feedLoaded = append(ackLoaded, quantileMS(ack, 99)), append(feedLoaded, quantileMS(less(lat, ack), 99))
		ts.stop(b)
	}
	b.ReportMetric(median(p50Alone), "b_p50_alone_ms")
	b.ReportMetric(median(p50Loaded), "b_p50_loaded_ms")
	b.ReportMetric(median(p99Alone), "b_p99_alone_ms")
	b.ReportMetric(median(p99Loaded), "b_p99_loaded_ms")
	b.ReportMetric(median(p99Loaded)/median(p99Alone), "b_p99_ratio")
	b.ReportMetric(median(ackAlone), "b_ack_p99_alone_ms")
	b.ReportMetric(median(ackLoaded), "b_ack_p99_loaded_ms")
	b.ReportMetric(median(feedAlone), "b_feed_p99_alone_ms")
	b.ReportMetric(median(feedLoaded), "b_feed_p99_loaded_ms")
	b.ReportMetric(median(feedLoaded)/median(feedAlone), "b_feed_p99_ratio")
	b.ReportMetric(median(aRate), "a_mut/s")
	b.ReportMetric(median(aDeliveries), "a_deliveries/s")
}

// less is a[i]-b[i] for each i.
func less(a, b []time.Duration) []time.Duration {
	d := make([]time.Duration, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return d
}

// quantileMS is the q-th percentile of lat in milliseconds.
func quantileMS(lat []time.Duration, q int) float64 {
	v := make([]float64, len(lat))
	for i, d := range lat {
		v[i] = float64(d.Microseconds()) / 1000
	}
	slices.Sort(v)
	return v[min(len(v)-1, len(v)*q/100)]
}
