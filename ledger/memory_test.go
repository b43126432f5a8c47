package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/ledger"
	"github.com/syncd-dev/syncd/ledger/ledgertest"
)

// memoryStore adapts *ledger.Memory to the suite's Store.
type memoryStore struct{ *ledger.Memory }

func (m memoryStore) Begin(ctx context.Context) (ledgertest.Txn, error) {
	return m.Memory.Begin(ctx)
}

func (memoryStore) Close() error { return nil }

func TestMemoryConformance(t *testing.T) {
	ledgertest.Run(t, ledgertest.Harness{
		Open: func(t *testing.T, _ string, opts ledger.Options) ledgertest.Store {
			m, err := ledger.NewMemory(opts)
			require.NoError(t, err)
			return memoryStore{m}
		},
	})
}

func TestMemoryBeginWaitsForOpenTransaction(t *testing.T) {
	m, err := ledger.NewMemory(ledger.Options{})
	require.NoError(t, err)
	first, err := m.Begin(t.Context())
	require.NoError(t, err)

	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = m.Begin(canceled)
	require.ErrorIs(t, err, context.Canceled, "Begin must wait for the open transaction, and give up with ctx")

	next := make(chan error, 1)
	go func() {
		tx, err := m.Begin(t.Context())
		if err == nil {
			err = tx.Rollback()
		}
		next <- err
	}()
	d := ledger.Decision{Scope: "s", OpID: "op", OpTime: time.UnixMilli(1)}
	require.NoError(t, first.Record(t.Context(), d))
	require.NoError(t, first.Commit())
	require.NoError(t, <-next)
}

func TestOptionsRejectNegatives(t *testing.T) {
	for name, opts := range map[string]ledger.Options{
		"MaxAge":     {MaxAge: -time.Second},
		"MaxEntries": {MaxEntries: -1},
		"PruneChunk": {PruneChunk: -1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ledger.NewMemory(opts)
			require.ErrorContains(t, err, name)
			_, err = ledger.NewSQL(t.Context(), openDB(t, t.TempDir(), immediate), opts)
			require.ErrorContains(t, err, name)
		})
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[ledger.Outcome]string{
		ledger.Miss: "miss", ledger.Hit: "hit", ledger.Expired: "expired", ledger.Outcome(7): "Outcome(7)",
	} {
		require.Equal(t, want, o.String())
	}
}
