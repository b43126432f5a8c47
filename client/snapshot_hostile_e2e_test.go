package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/syncproto"
)

// hostileServer speaks just enough of PROTOCOL.md to make a fresh client
// resync (healthz, hello/welcome with a head, ping/pong), then serves a
// snapshot that never ends: its header, then records made by record, one
// after another, until the client hangs up. It never answers a push.
type hostileServer struct {
	*httptest.Server
	record    func(buf []byte, i uint64) []byte // appends record line i to buf
	pause     time.Duration                     // between record lines
	snapshots atomic.Int64                      // snapshot requests served
	served    atomic.Int64                      // snapshot bytes written
}

func startHostileServer(t *testing.T, record func(buf []byte, i uint64) []byte, pause time.Duration) *hostileServer {
	t.Helper()
	h := &hostileServer{record: record, pause: pause}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("GET "+syncproto.SyncPath, h.sync)
	mux.HandleFunc("GET "+syncproto.SnapshotPath, h.snapshot)
	h.Server = httptest.NewServer(mux) // 127.0.0.1
	t.Cleanup(h.Close)
	return h
}

func (h *hostileServer) sync(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{syncproto.Subprotocol}})
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ws.SetReadLimit(syncproto.MaxFrameBytes)
	ctx := r.Context()
	for {
		_, frame, err := ws.Read(ctx)
		if err != nil {
			return
		}
		msg, err := syncproto.Decode(frame)
		if err != nil {
			return
		}
		var answer syncproto.Message
		switch m := msg.(type) {
		case *syncproto.Hello:
			answer = &syncproto.Welcome{ID: m.ID, NodeID: "hostile", ServerHLC: syncproto.Timestamp{Wall: time.Now().UnixMilli(), Origin: "hostile"},
				ServerTime: time.Now().UnixMilli(), DatabaseID: "db-hostile", Head: 1,
				Limits: syncproto.DefaultLimits()}
		case *syncproto.Ping:
			answer = &syncproto.Pong{ID: m.ID}
		default:
			continue
		}
		out, err := syncproto.Encode(answer)
		if err != nil {
			return
		}
		if err := ws.Write(ctx, websocket.MessageText, out); err != nil {
			return
		}
	}
}

func (h *hostileServer) snapshot(w http.ResponseWriter, r *http.Request) {
	h.snapshots.Add(1)
	w.Header().Set("Content-Type", syncproto.SnapshotContentType)
	buf := []byte(`{"head":1}` + "\n")
	for i := uint64(1); r.Context().Err() == nil; i++ {
		n, err := w.Write(buf)
		h.served.Add(int64(n))
		if err != nil {
			return
		}
		if h.pause > 0 {
			w.(http.Flusher).Flush()
			select {
			case <-time.After(h.pause):
			case <-r.Context().Done():
				return
			}
		}
		buf = h.record(buf[:0], i)
	}
}

// recordLine returns a record maker whose values are strings of valueBytes
// bytes, under distinct keys.
func recordLine(valueBytes int) func(buf []byte, i uint64) []byte {
	value, err := json.Marshal(strings.Repeat("x", valueBytes))
	if err != nil {
		panic(err)
	}
	hlc := syncproto.Timestamp{Wall: time.Now().UnixMilli(), Origin: "hostile"}.String()
	return func(buf []byte, i uint64) []byte {
		buf = append(buf, `{"model":"todos","key":"k`...)
		buf = strconv.AppendUint(buf, i, 10)
		buf = append(buf, `","value":`...)
		buf = append(buf, value...)
		buf = append(buf, `,"version":1,"hlc":"`...)
		buf = append(buf, hlc...)
		return append(buf, `","deleted":false}`+"\n"...)
	}
}

// openHostileDevice opens a client of h with one write queued before it
// connects.
func openHostileDevice(t *testing.T, h *hostileServer, tweak func(*client.Config)) (*client.Client, *prometheus.Registry) {
	t.Helper()
	dir := t.TempDir()
	q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	cfg := client.Config{
		ServerURLs: []string{h.URL}, Token: "t", ClientID: "victim", Queue: q,
		ProbeInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond, MaxRetryInterval: 200 * time.Millisecond,
		Registerer: reg, Logger: failureLog(t, "victim"),
	}
	tweak(&cfg)
	c, err := client.Open(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c, reg
}

// heapPeak samples the heap until stop is called, which returns the
// highest HeapInuse and HeapAlloc seen.
func heapPeak() (stop func() (inuse, alloc uint64)) {
	var peakInuse, peakAlloc uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peakInuse, peakAlloc = max(peakInuse, ms.HeapInuse), max(peakAlloc, ms.HeapAlloc)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() (uint64, uint64) {
		close(done)
		wg.Wait()
		return peakInuse, peakAlloc
	}
}

// A hostile server (or anyone in the middle of ws://) streams a snapshot
// that never ends, of the largest records the protocol allows. The client
// keeps its heap under 64 MiB while it reads more than that, gives up at
// MaxSnapshotBytes (counted), keeps its queued write and its replica, and
// tries again later.
func TestEndlessSnapshotIsBoundedInMemoryAndBytes(t *testing.T) {
	const heapBound = 64 << 20
	const maxBytes = heapBound + heapBound/4
	h := startHostileServer(t, recordLine(syncproto.MaxPayloadBytes-2), 0)
	runtime.GC()
	stop := heapPeak()
	c, reg := openHostileDevice(t, h, func(cfg *client.Config) { cfg.MaxSnapshotBytes = maxBytes })
	op, err := c.Put(context.Background(), "todos", "mine", json.RawMessage(`{"v":1}`))
	require.NoError(t, err)

	// Given up once at the bound, and tried again.
	require.Eventually(t, func() bool {
		return metric(t, reg, "syncd_client_snapshots_abandoned_total", "reason=too_large") >= 1 && h.snapshots.Load() >= 2
	}, 4*waitFor, pollTick) // 80 MiB through SQLite, under the race detector, beside other tests
	inuse, alloc := stop()
	t.Logf("served %d MiB in %d snapshots; heap peaks: in use %.1f MiB, allocated %.1f MiB",
		h.served.Load()>>20, h.snapshots.Load(), float64(inuse)/(1<<20), float64(alloc)/(1<<20))
	assert.Less(t, inuse, uint64(heapBound), "peak HeapInuse")
	assert.Less(t, alloc, uint64(heapBound), "peak HeapAlloc")
	assert.GreaterOrEqual(t, h.served.Load(), int64(maxBytes), "the client read up to its bound")

	// Nothing lost: the write is still queued and read back, the replica
	// holds no record of the hostile snapshot.
	st, err := c.Status(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, st.Pending)
	assert.Zero(t, st.Cursor)
	_, found, err := c.Get(context.Background(), "todos", "k1")
	require.NoError(t, err)
	assert.False(t, found)
	rec, found, err := c.Get(context.Background(), "todos", "mine")
	require.NoError(t, err)
	require.True(t, found)
	assert.JSONEq(t, `{"v":1}`, string(rec.Value))
	_, decided, err := c.Lookup(context.Background(), op)
	require.NoError(t, err)
	assert.False(t, decided)
	assert.Zero(t, metric(t, reg, "syncd_client_resyncs_total"))
}

// A hostile snapshot that trickles forever is ended by SnapshotTimeout,
// counted, and tried again later.
func TestTricklingSnapshotEndsAtItsTimeout(t *testing.T) {
	h := startHostileServer(t, recordLine(16), 10*time.Millisecond)
	c, reg := openHostileDevice(t, h, func(cfg *client.Config) { cfg.SnapshotTimeout = 500 * time.Millisecond })
	_, err := c.Put(context.Background(), "todos", "mine", json.RawMessage(`{"v":1}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return metric(t, reg, "syncd_client_snapshots_abandoned_total", "reason=timeout") >= 1 && h.snapshots.Load() >= 2
	}, waitFor, pollTick)
	st, err := c.Status(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, st.Pending)
	assert.Zero(t, st.Cursor)
	assert.Zero(t, metric(t, reg, "syncd_client_snapshots_abandoned_total", "reason=too_large"))
}
