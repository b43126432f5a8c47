package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/ledger"
)

// lookupAll answers ds (all of one scope) with one LookupAll in its own
// transaction.
func lookupAll(t *testing.T, st Store, scope string, ds []ledger.Decision) []ledger.Answer {
	t.Helper()
	req := make([]ledger.Op, len(ds))
	for i, d := range ds {
		req[i] = ledger.Op{ID: d.OpID, Time: d.OpTime}
	}
	tx := begin(t, st)
	answers, err := tx.LookupAll(t.Context(), scope, req)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	require.Len(t, answers, len(ds))
	return answers
}

// lookupAllAnswersLikeLookup: a batch lookup gives, op by op, what Lookup
// gives: hits with their decisions, misses, expired ops below the floor,
// an empty op id as a miss, and an op named twice answered twice.
func (s suite) lookupAllAnswersLikeLookup(t *testing.T) {
	st := s.open(t, ledger.Options{MaxEntries: 10})
	a := ops("tenant-a", 0, 20)
	record(t, st, a...)
	prune(t, st, base.Add(time.Hour), 10) // a[0:10] evicted; floor a[9]

	other := op("tenant-b", 5) // same op id as a[5], another scope
	record(t, st, other)
	batch := append([]ledger.Decision{}, a...)
	batch = append(batch,
		op("tenant-a", 30), // never decided, after the floor
		ledger.Decision{Scope: "tenant-a", OpID: "", OpTime: base},
		a[15], // named twice
	)
	answers := lookupAll(t, st, "tenant-a", batch)
	for i, d := range batch {
		want, wantOutcome := lookup(t, st, d)
		require.Equal(t, wantOutcome, answers[i].Outcome, "op %d %q", i, d.OpID)
		if wantOutcome == ledger.Hit {
			requireSame(t, want, answers[i].Decision)
		} else {
			require.Zero(t, answers[i].Decision, "op %d %q", i, d.OpID)
		}
	}
	require.Equal(t, ledger.Expired, answers[3].Outcome)
	require.Equal(t, ledger.Hit, answers[12].Outcome)
	require.Equal(t, ledger.Miss, answers[20].Outcome)

	tx := begin(t, st)
	_, err := tx.LookupAll(t.Context(), "tenant-a", []ledger.Op{{ID: "op-x"}})
	require.ErrorIs(t, err, ledger.ErrMissingOpTime)
	require.NoError(t, tx.Rollback())
}

// lookupAllInChunks: a batch larger than any one query an implementation
// would send is answered whole.
func (s suite) lookupAllInChunks(t *testing.T) {
	st := s.open(t, ledger.Options{})
	a := ops("tenant-a", 0, 1500)
	record(t, st, a[:1200]...)
	for i, ans := range lookupAll(t, st, "tenant-a", a) {
		want := ledger.Miss
		if i < 1200 {
			want = ledger.Hit
			requireSame(t, a[i], ans.Decision)
		}
		require.Equal(t, want, ans.Outcome, "op %d", i)
	}
}

// recordAllAllOrNone: RecordAll stores a batch like Record stores each of
// its decisions, and refuses a batch holding one refusable decision
// without storing any of it, leaving the transaction usable.
func (s suite) recordAllAllOrNone(t *testing.T) {
	st := s.open(t, ledger.Options{})
	ctx := t.Context()
	a, b := ops("tenant-a", 0, 250), ops("tenant-b", 0, 3)

	tx := begin(t, st)
	require.NoError(t, tx.RecordAll(ctx, append(append([]ledger.Decision{}, a[:200]...), b...)))
	require.NoError(t, tx.Commit())
	requireOutcomes(t, st, a[:200], func(int) ledger.Outcome { return ledger.Hit })
	requireStats(t, st, held(203, 2))

	refused := map[string][]ledger.Decision{
		"an op already held":      append(append([]ledger.Decision{}, a[200:240]...), a[7]),
		"an op named twice":       append(append([]ledger.Decision{}, a[200:240]...), a[210]),
		"an empty op id":          append(append([]ledger.Decision{}, a[200:240]...), ledger.Decision{Scope: "tenant-a", OpTime: base}),
		"a zero op time":          append(append([]ledger.Decision{}, a[200:240]...), ledger.Decision{Scope: "tenant-a", OpID: "x"}),
		"an op held in the chunk": append(append([]ledger.Decision{}, a[200:240]...), b[1]),
	}
	wantErr := map[string]error{
		"an op already held": ledger.ErrAlreadyDecided, "an op named twice": ledger.ErrAlreadyDecided,
		"an empty op id": ledger.ErrEmptyOpID, "a zero op time": ledger.ErrMissingOpTime,
		"an op held in the chunk": ledger.ErrAlreadyDecided,
	}
	for name, ds := range refused {
		tx := begin(t, st)
		require.ErrorIs(t, tx.RecordAll(ctx, ds), wantErr[name], name)
		require.NoError(t, tx.Record(ctx, a[249]), "%s: the transaction stays usable", name)
		require.NoError(t, tx.Rollback())
		requireOutcomes(t, st, a[200:240], func(int) ledger.Outcome { return ledger.Miss })
	}
	requireStats(t, st, held(203, 2))

	tx = begin(t, st)
	require.NoError(t, tx.RecordAll(ctx, a[200:]))
	require.NoError(t, tx.RecordAll(ctx, nil))
	require.NoError(t, tx.Commit())
	requireOutcomes(t, st, a, func(int) ledger.Outcome { return ledger.Hit })
	requireStats(t, st, held(253, 2))
}
