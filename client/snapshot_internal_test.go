package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/syncproto"
)

// Each way a snapshot download is abandoned comes back as its typed error
// and reason, and leaves the replica as it was.
func TestAbandonedSnapshotIsTypedAndLeavesTheReplica(t *testing.T) {
	record := func(i int) []byte {
		return fmt.Appendf(nil, `{"model":"todos","key":"k%d","value":{"v":1},"version":1,"hlc":"1700000000000.0.s","deleted":false}`+"\n", i)
	}
	endless := func(pause time.Duration) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"head":7}` + "\n"))
			for i := 0; r.Context().Err() == nil; i++ {
				if _, err := w.Write(record(i)); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				if pause > 0 {
					select {
					case <-time.After(pause):
					case <-r.Context().Done():
					}
				}
			}
		}
	}
	for _, tc := range []struct {
		name       string
		serve      http.HandlerFunc
		reason     string
		is         []error
		maxBytes   int64
		timeout    time.Duration
		wantErrMsg string
	}{
		{name: "beyond MaxSnapshotBytes", serve: endless(0), reason: abandonedTooLarge, is: []error{ErrSnapshotTooLarge}, maxBytes: 1 << 20, timeout: time.Minute},
		{name: "beyond SnapshotTimeout", serve: endless(time.Millisecond), reason: abandonedTimeout, is: []error{ErrSnapshotTimeout, context.DeadlineExceeded}, maxBytes: 1 << 30, timeout: 200 * time.Millisecond},
		{name: "refused", serve: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }, reason: abandonedStatus, maxBytes: 1 << 20, timeout: time.Minute, wantErrMsg: "503"},
		{name: "cut before its trailer", serve: func(w http.ResponseWriter, _ *http.Request) { w.Write(append([]byte(`{"head":7}`+"\n"), record(1)...)) }, reason: abandonedTruncate, is: []error{syncproto.ErrSnapshotTruncated}, maxBytes: 1 << 20, timeout: time.Minute},
		{name: "a line that does not validate", serve: func(w http.ResponseWriter, _ *http.Request) {
			w.Write([]byte(`{"head":7}` + "\n" + `{"model":"todos","key":"","value":1,"version":1,"hlc":"1700000000000.0.s","deleted":false}` + "\n"))
		}, reason: abandonedInvalid, maxBytes: 1 << 20, timeout: time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.serve)
			defer srv.Close()
			q, err := offlinequeue.OpenSQLite(filepath.Join(t.TempDir(), "queue.db"), offlinequeue.SQLiteOptions{})
			require.NoError(t, err)
			defer q.Close()
			r, err := openReplica(t.Context(), q, "", offlinequeue.SyncFull, time.Now)
			require.NoError(t, err)
			defer r.close()
			cfg := Config{Token: "t", HTTPClient: srv.Client(), MaxSnapshotBytes: tc.maxBytes, SnapshotTimeout: tc.timeout}
			c := &Client{cfg: cfg, replica: r, tokens: newTokens(cfg)}

			_, _, reason, err := c.fetchSnapshot(t.Context(), srv.URL, snapshotScopes{})
			require.Error(t, err)
			require.Equal(t, tc.reason, reason, "err: %v", err)
			for _, want := range tc.is {
				require.ErrorIs(t, err, want)
			}
			if tc.wantErrMsg != "" {
				require.ErrorContains(t, err, tc.wantErrMsg)
			}
			if tc.reason == abandonedInvalid {
				var pe *syncproto.Error
				require.True(t, errors.As(err, &pe), "err: %v", err)
			}
			cursor, err := r.cursor(t.Context())
			require.NoError(t, err)
			require.Zero(t, cursor, "the replica was left as it was")
			var n int
			require.NoError(t, r.db.QueryRowContext(t.Context(), `SELECT count(*) FROM records`).Scan(&n))
			require.Zero(t, n)
		})
	}
}
