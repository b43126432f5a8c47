package offlinequeue_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

// TestCommitEnqueuesCountsEveryEnqueueOnce: the group-commit histogram
// counts each durable write once and each enqueue in exactly one of them,
// for one producer (every write a lone enqueue) and for several at once.
func TestCommitEnqueuesCountsEveryEnqueueOnce(t *testing.T) {
	const perProducer = 40
	for _, k := range durableKindsForTest {
		for _, producers := range []int{1, 8} {
			t.Run(fmt.Sprintf("%s/producers=%d", k.name, producers), func(t *testing.T) {
				reg := prometheus.NewRegistry()
				m, err := offlinequeue.NewMetrics(reg)
				require.NoError(t, err)
				q := k.open(t, filepath.Join(t.TempDir(), "queue"), offlinequeue.Options{Metrics: m})
				defer q.Close()
				var wg sync.WaitGroup
				for p := range producers {
					wg.Go(func() {
						for i := range perProducer {
							_, err := q.Enqueue(t.Context(), []byte("x"), fmt.Sprintf("op-%d-%d", p, i))
							if err != nil {
								t.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				writes, enqueues := commitHistogram(t, reg)
				require.Equal(t, float64(producers*perProducer), enqueues, "every enqueue in one write")
				if producers == 1 {
					require.Equal(t, uint64(perProducer), writes, "one producer: one write per enqueue")
				} else {
					require.LessOrEqual(t, writes, uint64(producers*perProducer))
				}
			})
		}
	}
}

// durableKindsForTest opens each durable queue at path (a suffix added).
var durableKindsForTest = []struct {
	name string
	open func(t *testing.T, path string, o offlinequeue.Options) offlinequeue.Queue
}{
	{"file", func(t *testing.T, path string, o offlinequeue.Options) offlinequeue.Queue {
		q, err := offlinequeue.OpenFile(path+".ndjson", offlinequeue.FileOptions{Options: o})
		require.NoError(t, err)
		return q
	}},
	{"sqlite", func(t *testing.T, path string, o offlinequeue.Options) offlinequeue.Queue {
		q, err := offlinequeue.OpenSQLite(path+".db", offlinequeue.SQLiteOptions{Options: o})
		require.NoError(t, err)
		return q
	}},
}

// commitHistogram reads syncd_client_queue_commit_enqueues from reg: its
// count (durable writes) and sum (enqueues).
func commitHistogram(t testing.TB, reg *prometheus.Registry) (writes uint64, enqueues float64) {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "syncd_client_queue_commit_enqueues" {
			h := f.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	require.FailNow(t, "syncd_client_queue_commit_enqueues not gathered")
	return 0, 0
}
