package sqlitedb

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckpointerWriterNeverWaitsForARunningCheckpoint: while the
// goroutine's checkpoint is running (held here before its pass, with the
// checkpoint lock taken), the writer's Wrote finds the log beyond
// MaxLogPages with little enough left for its own step, and returns
// without copying and without waiting: every look is deferred. Once the
// goroutine's pass ends (it yields to the writer), a later write's Wrote
// copies what is left in its caller and the log starts over.
func TestCheckpointerWriterNeverWaitsForARunningCheckpoint(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "x.db"), Options{Synchronous: Normal, NoAutoCheckpoint: true})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)`)
	require.NoError(t, err)

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c := startCheckpointer(db, CheckpointerOptions{Every: 1, MaxLogPages: 100, InlineFrames: 10_000, LimitLogPages: 10_000}, func() {
		once.Do(func() { close(held); <-release })
	})
	t.Cleanup(c.Close)
	value := strings.Repeat("x", 3000) // a page a write
	write := func(n int) {
		for i := range n {
			_, err := db.ExecContext(ctx, `INSERT OR REPLACE INTO t (id, v) VALUES (?, ?)`, i%50, value)
			require.NoError(t, err)
			c.Wrote(1)
		}
	}

	write(1) // frames left to copy: Wrote asks the goroutine, which is held
	<-held
	write(300) // the log passes MaxLogPages while the goroutine runs
	s := c.Stats()
	require.GreaterOrEqual(t, s.LogFrames, int64(300), "the log grew past MaxLogPages")
	require.Zero(t, s.Writer+s.WriterAtLimit, "the writer copied nothing while the goroutine ran")
	require.Greater(t, s.Deferred, int64(100), "every look beyond MaxLogPages was deferred, none waited")
	require.Zero(t, s.Background, "the held goroutine copied nothing")

	close(release)
	for c.Stats().Writer == 0 {
		write(1) // returns whether or not the goroutine has let go yet
	}
	s = c.Stats()
	require.GreaterOrEqual(t, s.WriterFrames, int64(300), "the writer's step copied what the goroutine left")
	write(1)
	require.Less(t, c.Stats().LogFrames, int64(100), "the log started over")
}
