package replication_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/ledger"
	r "github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// batchGen makes random pushes from a few clients over a few keys: puts
// and deletes, LWW and optimistic models, bases that are sometimes stale,
// resends of earlier ops, and op ids reused for other content.
type batchGen struct {
	rng     *rand.Rand
	n       int
	sent    []syncproto.Mutation // every mutation sent, for resends
	seen    map[string]uint64    // client/model/key -> version it saw
	clients []string
	keys    [][2]string
}

func newBatchGen(seed uint64) *batchGen {
	return &batchGen{
		rng:     rand.New(rand.NewPCG(seed, 11)),
		seen:    map[string]uint64{},
		clients: []string{"c1", "c2", "c3"},
		keys:    [][2]string{{"notes", "a"}, {"notes", "b"}, {"accounts", "x"}, {"accounts", "y"}},
	}
}

var genPolicies = r.Config{"accounts": syncproto.PolicyOptimistic}

func (g *batchGen) batch() r.Batch {
	c := g.clients[g.rng.IntN(len(g.clients))]
	b := r.Batch{Tenant: "t1", ClientID: c, At: time.UnixMilli(1_000_000 + int64(g.n)).UTC()}
	for range 1 + g.rng.IntN(5) {
		var m syncproto.Mutation
		switch roll := g.rng.IntN(10); {
		case roll == 0 && len(g.sent) > 0: // a resend
			m = g.sent[g.rng.IntN(len(g.sent))]
		case roll == 1 && len(g.sent) > 0: // an op id reused for other content
			m = g.fresh(c)
			m.OpID = g.sent[g.rng.IntN(len(g.sent))].OpID
		default:
			m = g.fresh(c)
		}
		g.sent = append(g.sent, m)
		b.Writes = append(b.Writes, r.Write{Mutation: m, Policy: genPolicies.For(m.Model)})
	}
	return b
}

func (g *batchGen) fresh(c string) syncproto.Mutation {
	g.n++
	k := g.keys[g.rng.IntN(len(g.keys))]
	m := syncproto.Mutation{
		OpID: fmt.Sprintf("0193a1f0-5c1e-7a4b-9d2e-%012d", g.n), Model: k[0], Key: k[1], Op: syncproto.OpPut,
		Value: []byte(fmt.Sprintf(`{"n":%d}`, g.n)), HLC: ts(1000+g.rng.Int64N(50), uint32(g.rng.IntN(3)), c),
	}
	if g.rng.IntN(6) == 0 {
		m.Op, m.Value = syncproto.OpDelete, nil
	}
	if k[0] == "accounts" || g.rng.IntN(4) == 0 {
		m.BaseVersion = ptr(g.seen[c+"/"+k[0]+"/"+k[1]])
	}
	return m
}

// learn updates what each client saw from a batch's answers.
func (g *batchGen) learn(b r.Batch, fx r.Effects) {
	for i, res := range fx.Results {
		m := b.Writes[i].Mutation
		sk := b.ClientID + "/" + m.Model + "/" + m.Key
		switch {
		case res.Status == syncproto.StatusApplied:
			g.seen[sk] = res.Version
		case res.Winner != nil:
			g.seen[sk] = res.Winner.Version
		}
	}
}

// TestApplyPath drives random batches from several clients through the
// state machine on a real database, several batches per transaction
// (group commit) and some transactions rolled back, then checks what a
// reader sees: gap-free seqs, versions per key 1..n with no gap, each
// record equal to its key's last entry, LWW keys at their max-HLC applied
// write, a conflict row for every loser, a ledger row for every decision,
// and a snapshot consistent with the log's head.
func TestApplyPath(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{}, r.Retention{})
	st, err := r.OpenStore(ctx, s.db, r.StoreOptions{})
	require.NoError(t, err)
	g := newBatchGen(7)

	type key struct{ model, key string }
	committed := map[key][]syncproto.Mutation{} // applied LWW writes
	var wantConflicts, rolledBack int
	statuses := map[syncproto.Status]int{}
	decided := map[string]syncproto.Result{}

	for txn := range 40 {
		tx, err := s.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		var head uint64
		pendingApplied := map[key][]syncproto.Mutation{}
		pendingDecided := map[string]syncproto.Result{}
		pendingConflicts := 0
		var learned []func()
		for range 1 + g.rng.IntN(3) { // batches sharing this transaction
			b := g.batch()
			fx, err := r.Apply(ctx, st.In(tx), &b)
			require.NoError(t, err)
			require.Len(t, fx.Results, len(b.Writes))
			for i, res := range fx.Results {
				statuses[res.Status]++
				m := b.Writes[i].Mutation
				switch res.Status {
				case syncproto.StatusApplied:
					pendingApplied[key{m.Model, m.Key}] = append(pendingApplied[key{m.Model, m.Key}], m)
					fallthrough
				case syncproto.StatusSuperseded, syncproto.StatusConflict:
					pendingDecided[m.OpID] = res
				case syncproto.StatusDuplicate:
					first, ok := pendingDecided[m.OpID]
					if !ok {
						first, ok = decided[m.OpID]
					}
					require.True(t, ok, "duplicate of an op never decided")
					first.OriginalStatus, first.Status = first.Status, syncproto.StatusDuplicate
					require.Equal(t, first, res, "a resend is answered with the first decision")
				}
			}
			for _, e := range fx.Entries {
				head = e.Seq
			}
			pendingConflicts += len(fx.Conflicts)
			learned = append(learned, func() { g.learn(b, fx) })
		}
		if txn%7 == 3 {
			require.NoError(t, tx.Rollback())
			rolledBack++
			continue
		}
		require.NoError(t, tx.Commit())
		if head > 0 {
			st.Committed(head)
		}
		for _, l := range learned {
			l()
		}
		for k, ms := range pendingApplied {
			committed[k] = append(committed[k], ms...)
		}
		for op, res := range pendingDecided {
			decided[op] = res
		}
		wantConflicts += pendingConflicts
	}
	require.Positive(t, rolledBack)
	for _, status := range []syncproto.Status{syncproto.StatusApplied, syncproto.StatusSuperseded,
		syncproto.StatusConflict, syncproto.StatusDuplicate, syncproto.StatusRejected} {
		require.Positive(t, statuses[status], "the run never produced %s", status)
	}

	// The log: seqs 1..head without a gap; per key, versions 1..n.
	page := read(t, s, r.ReadRequest{Scope: r.Scope{Tenant: "t1", AllModels: true}, Limit: r.MaxReadLimit})
	require.True(t, page.CaughtUp())
	last := map[key]r.Entry{}
	for i, e := range page.Entries {
		require.Equal(t, uint64(i+1), e.Seq, "seq gap")
		k := key{e.Model, e.Key}
		require.Equal(t, last[k].Version+1, e.Version, "version gap on %v", k)
		last[k] = e
	}
	require.Equal(t, uint64(len(page.Entries)), page.Head)

	// The records: each is its key's last entry; LWW keys hold the max-HLC
	// unconditional write that was applied.
	var snap []r.Record
	head, err := s.records.Snapshot(ctx, r.Scope{Tenant: "t1", AllModels: true}, func(_ uint64, x r.Record) error {
		snap = append(snap, x)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, page.Head, head)
	require.Len(t, snap, len(last))
	for _, x := range snap {
		k := key{x.Model, x.Key}
		require.Equal(t, last[k].Record(), x)
	}

	conflicts, err := s.conflicts.List(ctx, r.ConflictFilter{Scope: r.Scope{Tenant: "t1", AllModels: true}, Limit: r.MaxConflictListLimit})
	require.NoError(t, err)
	require.Len(t, conflicts, wantConflicts)

	for op := range decided {
		_, ok, err := st.Ledger.Get(ctx, "t1", op)
		require.NoError(t, err)
		require.True(t, ok, "decided op %s has no ledger row", op)
	}
}

// TestMemoryAgreesWithStore: the state machine is deterministic and its
// two stores are one machine: the same batches decided by Memory and by
// the SQLite Store give the same answers, entries, conflict rows and
// ledger rows, and serve the same feed and snapshot.
func TestMemoryAgreesWithStore(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{}, r.Retention{})
	st, err := r.OpenStore(ctx, s.db, r.StoreOptions{})
	require.NoError(t, err)
	mem, err := r.NewMemory(r.MemoryOptions{})
	require.NoError(t, err)
	g := newBatchGen(99)

	for range 300 {
		b := g.batch()
		want, err := mem.Apply(ctx, &b)
		require.NoError(t, err)
		var got r.Effects
		inTx(t, s.db, func(tx *sql.Tx) error {
			got, err = r.Apply(ctx, st.In(tx), &b)
			return err
		})
		require.Equal(t, want, got)
		g.learn(b, got)
	}

	scope := r.Scope{Tenant: "t1", AllModels: true}
	for _, after := range []uint64{0, 17, 150} {
		want, err := mem.Read(ctx, r.ReadRequest{After: after, Scope: scope, Limit: 50})
		require.NoError(t, err)
		got := read(t, s, r.ReadRequest{After: after, Scope: scope, Limit: 50})
		require.Equal(t, want, got)
	}
	wantHead, wantRecords := mem.Snapshot(scope)
	var gotRecords []r.Record
	gotHead, err := s.records.Snapshot(ctx, scope, func(_ uint64, x r.Record) error {
		gotRecords = append(gotRecords, x)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, wantHead, gotHead)
	require.Equal(t, wantRecords, gotRecords)
}

// TestDecide is the table of the state machine's transition.
func TestDecide(t *testing.T) {
	at := time.UnixMilli(5000).UTC()
	op := func(n int) string { return fmt.Sprintf("0193a1f0-5c1e-7a4b-9d2e-%012d", n) }
	mut := func(n int, key string, wall int64) syncproto.Mutation {
		return syncproto.Mutation{OpID: op(n), Model: "notes", Key: key, Op: syncproto.OpPut,
			Value: []byte(fmt.Sprintf(`{"n":%d}`, n)), HLC: ts(wall, 0, "c1")}
	}
	write := func(m syncproto.Mutation) r.Write { return r.Write{Mutation: m, Policy: syncproto.PolicyLWW} }
	miss := ledger.Answer{Outcome: ledger.Miss}
	cur := r.Record{Tenant: "t1", Model: "notes", Key: "k", Value: []byte(`{"v":"old"}`), Version: 3,
		HLC: ts(1000, 0, "c2"), OpID: op(900), Seq: 7}
	batch := func(ws ...r.Write) r.Batch { return r.Batch{Tenant: "t1", ClientID: "c1", At: at, Writes: ws} }
	stored := func(res syncproto.Result, m syncproto.Mutation) ledger.Answer {
		return ledger.Answer{Outcome: ledger.Hit, Decision: ledger.Decision{Scope: "t1", OpID: m.OpID,
			Digest: []byte(m.Digest()), Result: []byte(mustJSON(t, res))}}
	}

	t.Run("a refused write is answered and nothing else", func(t *testing.T) {
		w := write(mut(1, "k", 2000))
		w.Refusal = syncproto.Errorf(syncproto.CodeForbiddenModel, "no")
		fx, err := r.Decide(r.View{Head: 7}, batch(w))
		require.NoError(t, err)
		require.Equal(t, []syncproto.Result{{OpID: op(1), Status: syncproto.StatusRejected, Code: syncproto.CodeForbiddenModel, Message: "no"}}, fx.Results)
		require.Empty(t, fx.Entries)
		require.Empty(t, fx.Decisions)
	})
	t.Run("an applied write is an entry, a record and a ledger row stamped with the batch time", func(t *testing.T) {
		m := mut(1, "k", 2000)
		fx, err := r.Decide(r.View{Head: 7, Ledger: map[string]ledger.Answer{op(1): miss},
			Records: map[r.RecordKey]r.Record{{Model: "notes", Key: "k"}: cur}}, batch(write(m)))
		require.NoError(t, err)
		res := syncproto.Result{OpID: op(1), Status: syncproto.StatusApplied, Version: 4, Seq: 8, HLC: m.HLC}
		require.Equal(t, []syncproto.Result{res}, fx.Results)
		require.Len(t, fx.Entries, 1)
		require.Equal(t, uint64(8), fx.Entries[0].Seq)
		require.Equal(t, at, fx.Entries[0].AppliedAt)
		require.Equal(t, "c1", fx.Entries[0].ClientID)
		require.Equal(t, []ledger.Decision{{Scope: "t1", OpID: op(1), OpTime: time.UnixMilli(2000).UTC(),
			Digest: []byte(m.Digest()), Result: []byte(mustJSON(t, res)), DecidedAt: at}}, fx.Decisions)
	})
	t.Run("a resend is answered with the first result", func(t *testing.T) {
		m := mut(1, "k", 2000)
		first := syncproto.Result{OpID: op(1), Status: syncproto.StatusApplied, Version: 1, Seq: 3, HLC: m.HLC}
		fx, err := r.Decide(r.View{Head: 7, Ledger: map[string]ledger.Answer{op(1): stored(first, m)}}, batch(write(m)))
		require.NoError(t, err)
		first.OriginalStatus, first.Status = first.Status, syncproto.StatusDuplicate
		require.Equal(t, []syncproto.Result{first}, fx.Results)
		require.Empty(t, fx.Entries)
		require.Empty(t, fx.Decisions)
	})
	t.Run("an op id reused for other content is refused", func(t *testing.T) {
		m := mut(1, "k", 2000)
		first := syncproto.Result{OpID: op(1), Status: syncproto.StatusApplied, Version: 1, Seq: 3, HLC: m.HLC}
		other := m
		other.Value = []byte(`{"other":true}`)
		fx, err := r.Decide(r.View{Ledger: map[string]ledger.Answer{op(1): stored(first, m)}}, batch(write(other)))
		require.NoError(t, err)
		require.Equal(t, syncproto.CodeOpIDReused, fx.Results[0].Code)
		require.Empty(t, fx.Decisions)
	})
	t.Run("an op the ledger may have forgotten is expired, never applied", func(t *testing.T) {
		fx, err := r.Decide(r.View{Ledger: map[string]ledger.Answer{op(1): {Outcome: ledger.Expired}}}, batch(write(mut(1, "k", 2000))))
		require.NoError(t, err)
		require.Equal(t, syncproto.StatusExpired, fx.Results[0].Status)
		require.Empty(t, fx.Entries)
		require.Empty(t, fx.Decisions)
	})
	t.Run("later writes of a batch see the earlier ones", func(t *testing.T) {
		a, b := mut(1, "k", 2000), mut(2, "k", 1500) // b is older: it loses to a
		fx, err := r.Decide(r.View{Head: 7, Ledger: map[string]ledger.Answer{op(1): miss, op(2): miss}},
			batch(write(a), write(b), write(a)))
		require.NoError(t, err)
		require.Equal(t, syncproto.StatusApplied, fx.Results[0].Status)
		require.Equal(t, syncproto.StatusSuperseded, fx.Results[1].Status)
		require.Equal(t, uint64(1), fx.Results[1].Winner.Version)
		require.Equal(t, syncproto.StatusDuplicate, fx.Results[2].Status)
		require.Equal(t, uint64(8), fx.Results[2].Seq)
		require.Len(t, fx.Entries, 1)
		require.Len(t, fx.Conflicts, 1)
		require.Equal(t, at, fx.Conflicts[0].DecidedAt)
		require.Len(t, fx.Decisions, 2)
	})
	t.Run("an optimistic write without a base version is refused, not recorded", func(t *testing.T) {
		w := write(mut(1, "k", 2000))
		w.Policy = syncproto.PolicyOptimistic
		fx, err := r.Decide(r.View{Ledger: map[string]ledger.Answer{op(1): miss}}, batch(w))
		require.NoError(t, err)
		require.Equal(t, syncproto.CodeMissingBaseVersion, fx.Results[0].Code)
		require.Empty(t, fx.Decisions)
	})
	t.Run("a hook answer is carried out while the key is at its version", func(t *testing.T) {
		w := write(mut(1, "k", 500)) // older: LWW would supersede it
		w.Policy, w.Hook = syncproto.PolicyHook, &r.HookAnswer{Version: 3, Result: r.Accept()}
		view := r.View{Head: 7, Ledger: map[string]ledger.Answer{op(1): miss},
			Records: map[r.RecordKey]r.Record{{Model: "notes", Key: "k"}: cur}}
		fx, err := r.Decide(view, batch(w))
		require.NoError(t, err)
		require.Equal(t, syncproto.StatusApplied, fx.Results[0].Status)
		require.Empty(t, fx.Stale)

		w.Hook.Version = 2 // the hook saw an older state
		view.Ledger[op(2)] = miss
		fx, err = r.Decide(view, batch(w, write(mut(2, "other", 2000))))
		require.NoError(t, err)
		require.Equal(t, []int{0}, fx.Stale)
		require.Equal(t, syncproto.Result{}, fx.Results[0])
		require.Equal(t, syncproto.StatusApplied, fx.Results[1].Status, "the rest of the batch is decided")
		require.Len(t, fx.Decisions, 1)

		w.Hook = &r.HookAnswer{Version: 2, Fallback: r.FallbackStale}
		fx, err = r.Decide(view, batch(w))
		require.NoError(t, err)
		require.Equal(t, syncproto.StatusSuperseded, fx.Results[0].Status, "the fallback is last-writer-wins")
		require.Contains(t, fx.Conflicts[0].Reason, "hook fallback: stale")
	})
	t.Run("a malformed batch or view is an error", func(t *testing.T) {
		_, err := r.Decide(r.View{}, batch(write(mut(1, "k", 2000))))
		require.ErrorIs(t, err, r.ErrMalformedBatch, "no ledger answer")
		w := write(mut(1, "k", 2000))
		w.Policy = syncproto.PolicyHook
		_, err = r.Decide(r.View{Ledger: map[string]ledger.Answer{op(1): miss}}, batch(w))
		require.ErrorIs(t, err, r.ErrMalformedBatch, "no hook answer")
	})
}

// TestAdmit: the edge's refusals, one per rule, and the policy of each write.
func TestAdmit(t *testing.T) {
	now := time.UnixMilli(100_000)
	author := r.Author{Tenant: "t1", ClientID: "c1", CanWrite: func(m string) bool { return m != "audit" }}
	ok := syncproto.Mutation{OpID: "0193a1f0-5c1e-7a4b-9d2e-000000000001", Model: "notes", Key: "k",
		Op: syncproto.OpPut, Value: []byte(`1`), HLC: ts(100_000, 0, "c1")}
	with := func(f func(*syncproto.Mutation)) syncproto.Mutation { m := ok; f(&m); return m }
	muts := []syncproto.Mutation{
		ok,
		with(func(m *syncproto.Mutation) { m.Key = "" }),
		with(func(m *syncproto.Mutation) { m.Model = "audit" }),
		with(func(m *syncproto.Mutation) { m.HLC.Origin = "c2" }),
		with(func(m *syncproto.Mutation) { m.HLC.Wall += 61_000 }),
		with(func(m *syncproto.Mutation) { m.Model = "accounts" }),
	}
	b := r.Admit(author, muts, genPolicies, now, time.Minute)
	require.Equal(t, "t1", b.Tenant)
	require.Equal(t, "c1", b.ClientID)
	require.Equal(t, now.UTC(), b.At)
	var codes []syncproto.Code
	for _, w := range b.Writes {
		var code syncproto.Code
		if w.Refusal != nil {
			code = w.Refusal.Code
		}
		codes = append(codes, code)
	}
	require.Equal(t, []syncproto.Code{"", syncproto.CodeInvalidKey, syncproto.CodeForbiddenModel,
		syncproto.CodeInvalidHLC, syncproto.CodeClockSkew, syncproto.CodeMissingBaseVersion}, codes)
	require.Equal(t, syncproto.PolicyOptimistic, b.Writes[5].Policy)
	require.Equal(t, syncproto.PolicyLWW, b.Writes[0].Policy)
}
