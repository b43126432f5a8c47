package client

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/client/synccore"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/syncproto"
)

// testScopes declares scope project over tasks and comments by
// project_id; notes is covered by no scope.
var testScopes = map[string]syncproto.ScopeInfo{"project": {Models: map[string]string{"tasks": "project_id", "comments": "project_id"}}}

func scopedChange(seq uint64, model, key, project string, version uint64) syncproto.Change {
	v := json.RawMessage(`{"project_id":"` + project + `","seq":` + json.Number(uintString(seq)).String() + `}`)
	return syncproto.Change{Seq: seq, Model: model, Key: key, Op: syncproto.OpPut, Value: v, Version: version,
		HLC: syncproto.Timestamp{Wall: 1_700_000_000_000 + int64(seq), Origin: "srv"}, ScopeValue: project}
}

func uintString(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// scopeValueOf reads a record's stored scope value; found is false when
// the replica holds no record of the key.
func scopeValueOf(t *testing.T, r *replica, model, key string) (value string, version uint64, found bool) {
	t.Helper()
	var v int64
	err := r.db.QueryRowContext(t.Context(), `SELECT scope_value, version FROM records WHERE model = ? AND key = ?`, model, key).Scan(&value, &v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, false
	}
	require.NoError(t, err)
	return value, uint64(v), true
}

func TestReplicaAppliesScopedFeed(t *testing.T) {
	forEachLayout(t, func(t *testing.T, r *replica) {
		ctx := t.Context()
		r.fields.Store(newScopeFields(testScopes, nil))
		cov := coveredBy(testScopes)
		p1a, p1b, p2 := scopedChange(1, "tasks", "a", "p1", 1), scopedChange(2, "comments", "b", "p1", 1), scopedChange(3, "tasks", "c", "p2", 1)
		note := syncproto.Change{Seq: 4, Model: "notes", Key: "n", Op: syncproto.OpPut, Value: json.RawMessage(`{"project_id":"p1"}`), Version: 1, HLC: p1a.HLC}
		_, _, err := r.applyChanges(ctx, synccore.Apply{Cursor: 4, Entries: []syncproto.Change{p1a, p1b, p2, note}}, cov)
		require.NoError(t, err)
		v, _, _ := scopeValueOf(t, r, "tasks", "a")
		require.Equal(t, "p1", v)
		v, _, _ = scopeValueOf(t, r, "notes", "n")
		require.Empty(t, v, "a model no scope covers has no scope value")

		// A delete keeps the record's scope value.
		del := syncproto.Change{Seq: 5, Model: "tasks", Key: "c", Op: syncproto.OpDelete, Version: 2, HLC: p2.HLC, Deleted: true, ScopeValue: "p2"}
		_, _, err = r.applyChanges(ctx, synccore.Apply{Cursor: 5, Entries: []syncproto.Change{del}}, cov)
		require.NoError(t, err)
		v, _, found := scopeValueOf(t, r, "tasks", "c")
		require.True(t, found)
		require.Equal(t, "p2", v)

		// An evict entry drops its row, unless held at a newer version.
		mv := syncproto.Change{Seq: 6, Model: "tasks", Key: "a", Op: syncproto.OpEvict, Version: 2, HLC: p1a.HLC, Reason: syncproto.EvictMoved}
		stale := syncproto.Change{Seq: 6, Model: "comments", Key: "b", Op: syncproto.OpEvict, Version: 0, HLC: p1a.HLC, Reason: syncproto.EvictMoved}
		_, dropped, err := r.applyChanges(ctx, synccore.Apply{Cursor: 6, Entries: []syncproto.Change{mv, stale}}, cov)
		require.NoError(t, err)
		require.Equal(t, []evicted{{model: "tasks", key: "a", reason: syncproto.EvictMoved, scopeValue: "p1", at: 6}}, dropped,
			"an eviction names the value the row had and the seq of the moving write")
		_, _, found = scopeValueOf(t, r, "tasks", "a")
		require.False(t, found)
		_, _, found = scopeValueOf(t, r, "comments", "b")
		require.True(t, found, "a row held at a newer version than the evict entry stays")

		// A pending write of a row whose value is evicted stays in the
		// overlay: Get shows it until it is answered.
		m := &syncproto.Mutation{OpID: "0193a000-0000-7000-8000-000000000001", Model: "comments", Key: "b", Op: syncproto.OpPut,
			Value: json.RawMessage(`{"project_id":"p1","mine":true}`), HLC: p1a.HLC}
		require.NoError(t, r.addPending(ctx, 1, m))

		// An eviction drops every row of the value in the models its scope
		// covers, after the frame's entries; the state is stored with it.
		p1c := scopedChange(7, "tasks", "d", "p1", 1)
		st := synccore.Scopes{Have: syncproto.ScopeSet{"project": {"p2"}}, Resume: map[string]map[string]string{}}
		_, dropped, err = r.applyChanges(ctx, synccore.Apply{Cursor: 7, Entries: []syncproto.Change{p1c},
			Evictions: []syncproto.Eviction{{Scope: "project", Value: "p1", Reason: syncproto.EvictRevoked}}, Scopes: &st}, cov)
		require.NoError(t, err)
		require.ElementsMatch(t, []evicted{{"comments", "b", "revoked", "p1", 7}, {"tasks", "d", "revoked", "p1", 7}}, dropped,
			"an eviction of a value is read at the frame's cursor")
		_, _, found = scopeValueOf(t, r, "notes", "n")
		require.True(t, found, "a model the scope does not cover keeps its rows")
		rec, found, err := r.get(ctx, "comments", "b")
		require.NoError(t, err)
		require.True(t, found && rec.Pending, "the queued write's row stays until it is answered")
		rec, found, err = r.get(ctx, "tasks", "d")
		require.NoError(t, err)
		require.False(t, found, "an evicted row is not found: %+v", rec)
		got, err := r.scopeState(ctx)
		require.NoError(t, err)
		require.Equal(t, syncproto.ScopeSet{"project": {"p2"}}, got.Have)
		cursor, err := r.cursor(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 7, cursor)
	})
}

func TestReplicaAppliesBackfillByVersion(t *testing.T) {
	forEachLayout(t, func(t *testing.T, r *replica) {
		ctx := t.Context()
		cov := coveredBy(testScopes)
		// The feed already brought a newer version of b.
		_, _, err := r.applyChanges(ctx, synccore.Apply{Cursor: 20, Entries: []syncproto.Change{scopedChange(20, "tasks", "b", "p2", 5)}}, cov)
		require.NoError(t, err)
		page := []syncproto.Change{scopedChange(10, "tasks", "a", "p2", 3), scopedChange(11, "tasks", "b", "p2", 4)}
		st := synccore.Scopes{Have: syncproto.ScopeSet{}, Resume: map[string]map[string]string{"project": {"p2": "tasks/b"}}}
		fresh, err := r.applyBackfill(ctx, synccore.ApplyBackfill{Scope: "project", Value: "p2", Entries: page, Scopes: st})
		require.NoError(t, err)
		require.Len(t, fresh, 1)
		require.Equal(t, "a", fresh[0].Key)
		_, v, _ := scopeValueOf(t, r, "tasks", "b")
		require.EqualValues(t, 5, v, "a backfill entry never lowers a version")
		cursor, err := r.cursor(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 20, cursor, "a backfill does not move the cursor")
		got, err := r.scopeState(ctx)
		require.NoError(t, err)
		require.Equal(t, "tasks/b", got.Resume["project"]["p2"])
	})
}

func TestReplicaKeepsOnlyFollowedValuesAfterASnapshot(t *testing.T) {
	forEachLayout(t, func(t *testing.T, r *replica) {
		ctx := t.Context()
		r.fields.Store(newScopeFields(testScopes, nil))
		cov := coveredBy(testScopes)
		// A row the replica held before is replaced, not kept.
		_, _, err := r.applyChanges(ctx, synccore.Apply{Cursor: 3, Entries: []syncproto.Change{scopedChange(1, "tasks", "old", "p1", 1)}}, cov)
		require.NoError(t, err)
		var body bytes.Buffer
		// The header says the snapshot holds p1 and p3 (p4, requested, is
		// not granted), as syncd writes it for this request.
		held := syncproto.ScopeSet{"project": {"p1", "p3"}}
		sw, err := syncproto.NewScopedSnapshotWriter(&body, 9, held)
		require.NoError(t, err)
		for _, c := range []syncproto.Change{scopedChange(1, "tasks", "a", "p1", 1), scopedChange(2, "tasks", "b", "p2", 1),
			scopedChange(3, "comments", "c", "p3", 1), {Model: "notes", Key: "n", Value: json.RawMessage(`{"project_id":"p2"}`), Version: 1, HLC: syncproto.Timestamp{Wall: 1, Origin: "srv"}}} {
			require.NoError(t, sw.Write(syncproto.SnapshotRecord{Model: c.Model, Key: c.Key, Value: c.Value, Version: c.Version, HLC: c.HLC}))
		}
		require.NoError(t, sw.Close())
		sr, err := syncproto.NewSnapshotReader(&body)
		require.NoError(t, err)
		head, have, err := r.resetFromSnapshot(ctx, sr, snapshotScopes{want: syncproto.ScopeSet{"project": {"p1", "p3", "p4"}}, cov: cov, held: sr.Scopes()})
		require.NoError(t, err)
		require.EqualValues(t, 9, head)
		require.Equal(t, held, have, "the values the header holds; a requested value it does not name is not claimed")
		for key, want := range map[string]bool{"a": true, "b": false, "old": false} {
			_, _, found := scopeValueOf(t, r, "tasks", key)
			require.Equal(t, want, found, key)
		}
		_, _, found := scopeValueOf(t, r, "notes", "n")
		require.True(t, found, "a model no scope covers is kept whole")
		st, err := r.scopeState(ctx)
		require.NoError(t, err)
		require.Equal(t, have, st.Have)
	})
}

func TestSnapshotURLNamesTheRequest(t *testing.T) {
	require.Empty(t, snapshotScopes{}.query())
	q := snapshotScopes{want: syncproto.ScopeSet{"project": {"p1", "p 2"}, "team": {"*"}}}.query()
	require.Equal(t, "?scope=project%3Ap1&scope=project%3Ap+2&scope=team%3A%2A&scoped=1", q)
}

// A replica file of the first release (schema without scope values, no
// recorded version) is migrated on open; a file of a newer build is
// refused with both versions named.
func TestReplicaSchemaMigratesAndRefusesNewer(t *testing.T) {
	ctx := t.Context()
	for _, l := range replicaLayouts {
		t.Run(l.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "replica.db")
			q := l.open(t, dir)
			var db *sql.DB
			if sq, ok := q.(sharedQueue); ok {
				db = sq.DB()
			} else {
				var err error
				db, err = sqlitedb.Open(ctx, path, sqlitedb.Options{})
				require.NoError(t, err)
			}
			_, err := db.ExecContext(ctx, replicaSchema)
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, `INSERT INTO records (model, key, value, version, hlc, wall, deleted) VALUES ('tasks', 'a', '{"project_id":"p1"}', 1, '1.0.x', 1, 0)`)
			require.NoError(t, err)
			if _, ok := q.(sharedQueue); !ok {
				require.NoError(t, db.Close())
			}
			r, err := openReplica(ctx, q, path, offlinequeue.SyncFull, time.Now)
			require.NoError(t, err)
			v, _, found := scopeValueOf(t, r, "tasks", "a")
			require.True(t, found)
			require.Empty(t, v, "a record of the first release has no scope value")
			require.NoError(t, r.close())
			// A newer build's replica is refused.
			bump(ctx, t, q, path)
			_, err = openReplica(ctx, q, path, offlinequeue.SyncFull, time.Now)
			var newer *offlinequeue.NewerFormatError
			require.ErrorAs(t, err, &newer)
			require.Equal(t, len(replicaMigrations)+1, newer.File)
			require.Equal(t, len(replicaMigrations), newer.Known)
			require.NoError(t, q.Close())
		})
	}
}

// bump marks the replica as written by a build one schema version newer.
func bump(ctx context.Context, t *testing.T, q offlinequeue.Queue, path string) {
	t.Helper()
	if sq, ok := q.(sharedQueue); ok {
		_, err := sq.DB().ExecContext(ctx, `UPDATE meta SET value = value + 1 WHERE name = ?`, metaReplicaSchema)
		require.NoError(t, err)
		return
	}
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `PRAGMA user_version = 3`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
}

// A write of this device applied to a scope value it does not follow,
// and a conflict winner withheld for its scope value, leave no record.
func TestReplicaKeepsNoRecordOfAValueNotFollowed(t *testing.T) {
	forEachLayout(t, func(t *testing.T, r *replica) {
		ctx := t.Context()
		r.fields.Store(newScopeFields(testScopes, syncproto.ScopeSet{"project": {"p1"}}))
		hlc := syncproto.Timestamp{Wall: 1_700_000_000_000, Origin: "phone-1"}
		put := func(key, project string) *syncproto.Mutation {
			op, err := syncproto.NewOpID()
			require.NoError(t, err)
			return &syncproto.Mutation{OpID: op, Model: "tasks", Key: key, Op: syncproto.OpPut, Value: json.RawMessage(`{"project_id":"` + project + `"}`), HLC: hlc}
		}
		applied := func(m *syncproto.Mutation) Outcome {
			return Outcome{OpID: m.OpID, Status: StatusApplied, Version: 1, Seq: 1, HLC: m.HLC, DecidedAt: time.Now()}
		}
		mine, away := put("mine", "p1"), put("away", "p2")
		require.NoError(t, r.decide(ctx, mine, applied(mine)))
		require.NoError(t, r.decide(ctx, away, applied(away)))
		m1, m2 := put("many1", "p2"), put("many2", "p1")
		require.NoError(t, r.decideDone(ctx, []decision{{mut: m1, outcome: applied(m1)}, {mut: m2, outcome: applied(m2)}}, nil, true))
		_, _, found := scopeValueOf(t, r, "tasks", "many2")
		require.True(t, found)
		v, _, found := scopeValueOf(t, r, "tasks", "mine")
		require.True(t, found)
		require.Equal(t, "p1", v)
		for _, key := range []string{"away", "many1"} {
			_, _, found = scopeValueOf(t, r, "tasks", key)
			require.False(t, found, "%s was written to a value this device does not follow", key)
		}
		// A winner of a value not held is not stored.
		other := put("other", "p1")
		o := Outcome{OpID: other.OpID, Status: StatusSuperseded, DecidedAt: time.Now(),
			Winner: &syncproto.Winner{Version: 3, HLC: hlc, Value: json.RawMessage(`{"project_id":"p2"}`)}}
		require.NoError(t, r.decide(ctx, other, o))
		_, _, found = scopeValueOf(t, r, "tasks", "other")
		require.False(t, found, "the winner stands in p2, which this device does not follow")
		lost := put("lost", "p1")
		o = Outcome{OpID: lost.OpID, Status: StatusConflict, DecidedAt: time.Now(),
			Winner: &syncproto.Winner{Version: 4, HLC: hlc, ValueWithheld: true}}
		require.NoError(t, r.decide(ctx, lost, o))
		_, _, found = scopeValueOf(t, r, "tasks", "lost")
		require.False(t, found, "a withheld winner is never stored")
	})
}

// setCursor stores cursor as the replica's feed cursor.
func setCursor(t *testing.T, r *replica, cursor uint64) {
	t.Helper()
	require.NoError(t, r.write(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		return setMeta(ctx, tx, metaCursor, cursor)
	}))
}

// An answer read after the feed went past its write (a resend answered
// duplicate after a lost ack, or answers read behind a reconnect's
// catch-up) must not bring back a row the feed evicted: its value revoked,
// or the row moved to a value the device does not follow; nor a delete's
// tombstone. An answer ahead of the feed is taken. A write not kept
// because its value was not followed is no echo when the feed brings it
// once the value is.
func TestReplicaKeepsNoAnswerTheFeedOvertook(t *testing.T) {
	forEachLayout(t, func(t *testing.T, r *replica) {
		ctx := t.Context()
		r.fields.Store(newScopeFields(testScopes, syncproto.ScopeSet{"project": {syncproto.AllValues}}))
		cov := coveredBy(testScopes)
		hlc := syncproto.Timestamp{Wall: 1_700_000_000_000, Origin: "phone-1"}
		write := func(key, project string) *syncproto.Mutation {
			op, err := syncproto.NewOpID()
			require.NoError(t, err)
			m := &syncproto.Mutation{OpID: op, Model: "tasks", Key: key, Op: syncproto.OpDelete, HLC: hlc}
			if project != "" {
				m.Op, m.Value = syncproto.OpPut, json.RawMessage(`{"project_id":"`+project+`"}`)
			}
			return m
		}
		applied := func(m *syncproto.Mutation, seq uint64) decision {
			return decision{mut: m, outcome: Outcome{OpID: m.OpID, Status: StatusApplied, Version: 1, Seq: seq, HLC: m.HLC, DecidedAt: time.Now()}}
		}
		setCursor(t, r, 10)

		// p2 revoked at seq 12: the feed evicts it, then the answers of
		// writes applied at 11 (one by one, and as a batch) arrive.
		_, _, err := r.applyChanges(ctx, synccore.Apply{Cursor: 12, Evictions: []syncproto.Eviction{{Scope: "project", Value: "p2", Reason: syncproto.EvictRevoked}}}, cov)
		require.NoError(t, err)
		one, many, gone := write("revoked-one", "p2"), write("revoked-many", "p2"), write("revoked-deleted", "")
		d := applied(one, 11)
		require.NoError(t, r.decide(ctx, d.mut, d.outcome))
		require.NoError(t, r.decideDone(ctx, []decision{applied(many, 11), applied(gone, 11)}, nil, true))
		for _, key := range []string{"revoked-one", "revoked-many", "revoked-deleted"} {
			_, _, found := scopeValueOf(t, r, "tasks", key)
			require.False(t, found, "%s: the answer came after its value's eviction", key)
		}

		// A row written at 13 in p1 and moved to p3 at 14 by another
		// device: the feed's evict entry comes before the write's answer.
		moved := write("moved", "p1")
		mv := syncproto.Change{Seq: 14, Model: "tasks", Key: "moved", Op: syncproto.OpEvict, Version: 2, HLC: hlc, Reason: syncproto.EvictMoved}
		_, _, err = r.applyChanges(ctx, synccore.Apply{Cursor: 14, Entries: []syncproto.Change{mv}}, cov)
		require.NoError(t, err)
		require.NoError(t, r.decideDone(ctx, []decision{applied(moved, 13)}, nil, true))
		_, _, found := scopeValueOf(t, r, "tasks", "moved")
		require.False(t, found, "the feed moved the row away before the answer came")

		// The answer comes before the feed reaches its write: the records
		// take it (a later eviction drops it).
		early := write("early", "p9")
		require.NoError(t, r.decideDone(ctx, []decision{applied(early, 15)}, nil, true))
		v, _, found := scopeValueOf(t, r, "tasks", "early")
		require.True(t, found, "read your writes: a value followed, new or not")
		require.Equal(t, "p9", v)

		// A write to p5 while the device follows p1 alone is not kept;
		// once it follows p5, the feed's entry of the write is stored.
		r.fields.Store(newScopeFields(testScopes, syncproto.ScopeSet{"project": {"p1"}}))
		other := write("other", "p5")
		require.NoError(t, r.decideDone(ctx, []decision{applied(other, 16)}, nil, true))
		_, _, found = scopeValueOf(t, r, "tasks", "other")
		require.False(t, found)
		r.fields.Store(newScopeFields(testScopes, syncproto.ScopeSet{"project": {"p1", "p5"}}))
		entry := syncproto.Change{Seq: 16, OpID: other.OpID, Model: "tasks", Key: "other", Op: syncproto.OpPut, Value: other.Value, Version: 1, HLC: hlc, ScopeValue: "p5"}
		_, _, err = r.applyChanges(ctx, synccore.Apply{Cursor: 16, Entries: []syncproto.Change{entry}}, cov)
		require.NoError(t, err)
		v, _, found = scopeValueOf(t, r, "tasks", "other")
		require.True(t, found, "the feed entry of a write not kept is no echo")
		require.Equal(t, "p5", v)
	})
}

// A welcome that no longer grants every value of a scope the device
// followed whole asks for a resync, and keeps asking at every welcome
// (a device stopped before its snapshot was in) until the snapshot's
// welcome is settled; a scope the device requests by value, or one it
// was never granted whole, is not narrowed.
func TestNarrowedGrantsAskForAResyncUntilSettled(t *testing.T) {
	forEachLayout(t, func(t *testing.T, r *replica) {
		ctx := t.Context()
		c := &Client{replica: r, cfg: Config{Scopes: syncproto.ScopeSet{"team": {"red"}}}}
		info := map[string]syncproto.ScopeInfo{"project": {Models: map[string]string{"tasks": "project_id"}}, "team": {Models: map[string]string{"notes": "team"}}}
		welcome := func(project, team []string) *syncproto.Welcome {
			return &syncproto.Welcome{Scopes: info, Grants: syncproto.ScopeSet{"project": project, "team": team}}
		}
		narrowedBy := func(w *syncproto.Welcome) []string {
			t.Helper()
			_, narrowed, err := c.scopesWelcomed(ctx, w)
			require.NoError(t, err)
			return narrowed
		}
		all := []string{syncproto.AllValues}
		require.Empty(t, narrowedBy(welcome(all, all)), "the first welcome")
		require.Empty(t, narrowedBy(welcome(all, all)))
		narrow := welcome([]string{"p1"}, []string{"red"})
		require.Equal(t, []string{"project"}, narrowedBy(narrow), "team is requested by value")
		require.Equal(t, []string{"project"}, narrowedBy(narrow), "not settled yet: a device stopped before its snapshot")
		require.NoError(t, c.welcomeSettled(ctx, narrow))
		require.Empty(t, narrowedBy(narrow))
		require.Empty(t, narrowedBy(welcome([]string{"p1", "p2"}, all)), "never granted whole since")
	})
}
