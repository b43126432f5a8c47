package replication_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	r "github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// projectScopes declares scope project over tasks.project and
// members.project, with members granting by their user member.
func projectScopes(t testing.TB) *r.Scopes {
	t.Helper()
	var s r.Scopes
	require.NoError(t, s.Set("project=tasks.project,members.project"))
	require.NoError(t, s.SetMembership("project=members:user"))
	return &s
}

// scopedStore applies batches to a store with projectScopes and to a
// Memory with the same declarations, checking that both decide alike.
type scopedStore struct {
	t     *testing.T
	s     *store
	st    *r.Store
	mem   *r.Memory
	clock int64
}

func newScopedStore(t *testing.T) *scopedStore {
	scopes := projectScopes(t)
	s := openStore(t, r.Retention{}, r.Retention{})
	st, err := r.OpenStore(context.Background(), s.db, r.StoreOptions{Scopes: scopes})
	require.NoError(t, err)
	mem, err := r.NewMemory(r.MemoryOptions{})
	require.NoError(t, err)
	mem.DeclareScopes(scopes)
	return &scopedStore{t: t, s: s, st: st, mem: mem, clock: 1_700_000_000_000}
}

// push applies one batch of user's writes (with token grants) and returns
// the effects.
func (x *scopedStore) push(user string, grants syncproto.ScopeSet, muts ...syncproto.Mutation) r.Effects {
	x.t.Helper()
	client := user + ":phone"
	for i := range muts {
		x.clock++
		muts[i].HLC = ts(x.clock, 0, client)
		if muts[i].OpID == "" {
			muts[i].OpID = uuid.Must(uuid.NewV7()).String()
		}
	}
	a := r.Author{Tenant: "t1", ClientID: client, User: user, Grants: grants, CanWrite: func(string) bool { return true }}
	b := r.Admit(a, muts, r.Config{}, time.UnixMilli(x.clock), time.Minute)
	want, err := x.mem.Apply(context.Background(), &b)
	require.NoError(x.t, err)
	var got r.Effects
	inTx(x.t, x.s.db, func(tx *sql.Tx) error {
		got, err = r.Apply(context.Background(), x.st.In(tx), &b)
		return err
	})
	require.Equal(x.t, want, got, "Memory and the SQLite store decide alike")
	return got
}

func sput(model, key, value string) syncproto.Mutation {
	return syncproto.Mutation{Model: model, Key: key, Op: syncproto.OpPut, Value: []byte(value)}
}

func sdel(model, key string) syncproto.Mutation {
	return syncproto.Mutation{Model: model, Key: key, Op: syncproto.OpDelete}
}

func codes(fx r.Effects) []string {
	var out []string
	for _, res := range fx.Results {
		if res.Status == syncproto.StatusRejected {
			out = append(out, string(res.Code))
		} else {
			out = append(out, string(res.Status))
		}
	}
	return out
}

func TestScopedWritesAreCheckedAgainstGrants(t *testing.T) {
	x := newScopedStore(t)
	ctx := context.Background()

	// Nobody holds p1: a task there is refused, a value that is not a scope
	// value is refused, and nothing is recorded.
	fx := x.push("alice", nil,
		sput("tasks", "t1", `{"project":"p1"}`),
		sput("tasks", "t2", `{"title":"no project"}`),
		sput("tasks", "t3", `{"project":5}`),
		sput("tasks", "t4", `[1]`),
		sput("tasks", "t5", `{"project":"*"}`))
	require.Equal(t, []string{"forbidden_scope", "invalid_scope_value", "invalid_scope_value", "invalid_scope_value", "invalid_scope_value"}, codes(fx))
	require.Empty(t, fx.Entries)
	require.Empty(t, fx.Decisions, "scope refusals are not recorded: a resend after a grant is heard")

	// alice founds p1 with a membership row naming herself, and writes to
	// it in the same push: the grant is ordered before the write.
	fx = x.push("alice", nil,
		sput("members", "p1/alice", `{"project":"p1","user":"alice"}`),
		sput("tasks", "t1", `{"project":"p1","title":"a"}`))
	require.Equal(t, []string{"applied", "applied"}, codes(fx))
	require.Equal(t, []r.GrantChange{{User: "alice", Scope: "project", Value: "p1", Held: true}}, fx.Entries[0].Grants)
	require.Equal(t, "p1", fx.Entries[0].ScopeValue)
	require.Equal(t, "alice", fx.Entries[0].Member)
	require.Equal(t, "p1", fx.Entries[1].ScopeValue)
	require.Empty(t, fx.Entries[1].ScopeOld)

	// bob cannot found p1 again, nor write to it.
	fx = x.push("bob", nil,
		sput("members", "p1/bob", `{"project":"p1","user":"bob"}`),
		sput("tasks", "t9", `{"project":"p1"}`))
	require.Equal(t, []string{"forbidden_scope", "forbidden_scope"}, codes(fx))

	// alice shares p1 with bob; bob writes; a token grant works as well.
	fx = x.push("alice", nil, sput("members", "p1/bob", `{"project":"p1","user":"bob"}`))
	require.Equal(t, []r.GrantChange{{User: "bob", Scope: "project", Value: "p1", Held: true}}, fx.Entries[0].Grants)
	require.Equal(t, []string{"applied"}, codes(x.push("bob", nil, sput("tasks", "t2", `{"project":"p1"}`))))
	require.Equal(t, []string{"applied"}, codes(x.push("ops", syncproto.ScopeSet{"project": {"*"}}, sput("tasks", "t3", `{"project":"p9"}`))))
	require.Equal(t, []string{"forbidden_scope"}, codes(x.push("carol", syncproto.ScopeSet{"project": {"p2"}}, sput("tasks", "t3", `{"project":"p2"}`))),
		"a move needs the right on the old value too")

	// A move needs both values: alice founds p2, then moves t1 there.
	require.Equal(t, []string{"forbidden_scope"}, codes(x.push("alice", nil, sput("tasks", "t1", `{"project":"p2"}`))))
	fx = x.push("alice", nil,
		sput("members", "p2/alice", `{"project":"p2","user":"alice"}`),
		sput("tasks", "t1", `{"project":"p2","title":"moved"}`))
	require.Equal(t, []string{"applied", "applied"}, codes(fx))
	require.Equal(t, "p1", fx.Entries[1].ScopeOld)
	require.Equal(t, "p2", fx.Entries[1].ScopeValue)

	// bob holds p1 only: t1 is out of his reach now, a delete keeps the
	// scope value, and a resend of bob's write answered before never shows
	// a winner value.
	require.Equal(t, []string{"forbidden_scope"}, codes(x.push("bob", nil, sdel("tasks", "t1"))))
	fx = x.push("bob", nil, sdel("tasks", "t2"))
	require.Equal(t, "p1", fx.Entries[0].ScopeValue)
	require.Equal(t, "p1", fx.Entries[0].ScopeOld)

	// Unsharing is a write: bob loses p1.
	fx = x.push("alice", nil, sdel("members", "p1/bob"))
	require.Equal(t, []r.GrantChange{{User: "bob", Scope: "project", Value: "p1", Held: false}}, fx.Entries[0].Grants)
	require.Equal(t, []string{"forbidden_scope"}, codes(x.push("bob", nil, sput("tasks", "t5", `{"project":"p1"}`))))

	got, err := x.s.records.Grants(ctx, "t1", "alice", projectScopes(t))
	require.NoError(t, err)
	require.Equal(t, syncproto.ScopeSet{"project": {"p1", "p2"}}, got)
	got, err = x.s.records.Grants(ctx, "t1", "bob", projectScopes(t))
	require.NoError(t, err)
	require.Equal(t, syncproto.ScopeSet{}, got)
}

func TestDuplicateOfAScopedWriteWithholdsTheWinner(t *testing.T) {
	x := newScopedStore(t)
	grants := syncproto.ScopeSet{"project": {"p1"}}
	first := x.push("dave", grants, sput("tasks", "k", `{"project":"p1","n":2}`))
	require.Equal(t, []string{"applied"}, codes(first))
	// An older write of the same key loses (LWW) and gets the winner.
	older := sput("tasks", "k", `{"project":"p1","n":1}`)
	older.OpID = uuid.Must(uuid.NewV7()).String()
	a := r.Author{Tenant: "t1", ClientID: "dave:phone", User: "dave", Grants: grants, CanWrite: func(string) bool { return true }}
	older.HLC = ts(x.clock-100, 0, "dave:phone")
	b := r.Admit(a, []syncproto.Mutation{older}, r.Config{}, time.UnixMilli(x.clock), time.Minute)
	var fx r.Effects
	inTx(t, x.s.db, func(tx *sql.Tx) (err error) {
		fx, err = r.Apply(context.Background(), x.st.In(tx), &b)
		return err
	})
	require.Equal(t, syncproto.StatusSuperseded, fx.Results[0].Status)
	require.NotEmpty(t, fx.Results[0].Winner.Value, "the writer holds p1: it sees the winner")
	inTx(t, x.s.db, func(tx *sql.Tx) (err error) {
		fx, err = r.Apply(context.Background(), x.st.In(tx), &b)
		return err
	})
	require.Equal(t, syncproto.StatusDuplicate, fx.Results[0].Status)
	require.Empty(t, fx.Results[0].Winner.Value)
	require.True(t, fx.Results[0].Winner.ValueWithheld)
	require.NoError(t, fx.Results[0].Validate())
}

func TestFollowingReaderGetsEvictsAndStopsAtItsGrantChanges(t *testing.T) {
	x := newScopedStore(t)
	ctx := context.Background()
	x.push("alice", nil,
		sput("members", "p1/alice", `{"project":"p1","user":"alice"}`),
		sput("members", "p2/alice", `{"project":"p2","user":"alice"}`),
		sput("tasks", "a", `{"project":"p1"}`),
		sput("tasks", "b", `{"project":"p2"}`))
	x.push("alice", nil, sput("members", "p1/bob", `{"project":"p1","user":"bob"}`)) // seq 5: bob gains p1
	x.push("alice", nil, sput("tasks", "a", `{"project":"p2"}`))                     // seq 6: a leaves p1
	x.push("alice", nil, sput("tasks", "c", `{"project":"p1"}`))                     // seq 7
	x.push("alice", nil, sput("notes", "n", `{"any":1}`))                            // seq 8: not scoped

	scopes := projectScopes(t)
	base := r.Scope{Tenant: "t1", AllModels: true, Scopes: scopes, Follow: syncproto.ScopeSet{"project": {"p1"}}}
	for _, reader := range []struct {
		name string
		read func(req r.ReadRequest) r.Page
	}{
		{"sqlite", func(req r.ReadRequest) r.Page { return read(t, x.s, req) }},
		{"memory", func(req r.ReadRequest) r.Page {
			p, err := x.mem.Read(ctx, req)
			require.NoError(t, err)
			return p
		}},
	} {
		t.Run(reader.name, func(t *testing.T) {
			sc := base
			sc.User = "bob"
			page := reader.read(r.ReadRequest{After: 0, Scope: sc})
			require.Equal(t, uint64(5), page.Next, "the page ends at bob's grant change")
			require.Equal(t, []r.GrantChange{{User: "bob", Scope: "project", Value: "p1", Held: true}}, page.Grants)
			var seqs []string
			for _, e := range page.Entries {
				seqs = append(seqs, fmt.Sprintf("%d:%s/%s:%s", e.Seq, e.Model, e.Key, e.Op))
			}
			require.Equal(t, []string{"1:members/p1/alice:put", "3:tasks/a:put", "5:members/p1/bob:put"}, seqs)

			page = reader.read(r.ReadRequest{After: 5, Scope: sc})
			require.Len(t, page.Entries, 3)
			ev := page.Entries[0]
			require.Equal(t, syncproto.OpEvict, ev.Op, "a row that moved out of p1 is an evict entry")
			require.Equal(t, syncproto.EvictMoved, ev.Reason)
			require.Empty(t, ev.Value)
			require.Empty(t, ev.ScopeValue, "the evict never names where the row went")
			require.NoError(t, ev.Change.Validate())
			require.Equal(t, "c", page.Entries[1].Key)
			require.Equal(t, "notes", page.Entries[2].Model)
			require.True(t, page.CaughtUp())
		})
	}

	var keys []string
	_, err := x.s.records.Snapshot(ctx, base, func(_ uint64, rec r.Record) error {
		keys = append(keys, rec.Model+"/"+rec.Key)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"members/p1/alice", "members/p1/bob", "notes/n", "tasks/c"}, keys)
	_, memRecs := x.mem.Snapshot(base)
	require.Len(t, memRecs, len(keys))
}

func TestReadScopeValuePagesInKeyOrder(t *testing.T) {
	x := newScopedStore(t)
	ctx := context.Background()
	muts := []syncproto.Mutation{sput("members", "p1/alice", `{"project":"p1","user":"alice"}`)}
	for i := range 25 {
		muts = append(muts, sput("tasks", fmt.Sprintf("k%02d", i), `{"project":"p1"}`))
	}
	muts = append(muts, sput("tasks", "other", `{"project":"p7"}`))
	x.push("alice", syncproto.ScopeSet{"project": {"p7"}}, muts...)
	x.push("alice", nil, sdel("tasks", "k03"))

	d := projectScopes(t).Named("project")
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		page, err := x.s.records.ReadScopeValue(ctx, nil, "t1", "alice", d, "p1", after, 10, 1<<20)
		require.NoError(t, err)
		require.True(t, page.Member)
		require.Equal(t, uint64(28), page.At)
		for _, rec := range page.Records {
			got = append(got, rec.Model+"/"+rec.Key)
			require.Equal(t, "p1", rec.ScopeValue)
		}
		if page.Done {
			break
		}
		after = page.Last
	}
	require.Len(t, got, 25, "24 live tasks and alice's membership row; the tombstone and p7 are not read")
	require.Equal(t, "members/p1/alice", got[0])
	require.NotContains(t, got, "tasks/k03")
	page, err := x.s.records.ReadScopeValue(ctx, nil, "t1", "bob", d, "p1", "", 10, 1<<20)
	require.NoError(t, err)
	require.False(t, page.Member)
}

func TestDeclaringAScopeOverExistingRowsReindexesThemAndRenamesTheDatabase(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{}, r.Retention{})
	plain, err := r.OpenStore(ctx, s.db, r.StoreOptions{})
	require.NoError(t, err)
	a := r.Author{Tenant: "t1", ClientID: "alice:phone", User: "alice", CanWrite: func(string) bool { return true }}
	muts := []syncproto.Mutation{sput("tasks", "a", `{"project":"p1"}`), sput("tasks", "b", `{"title":"none"}`), sput("members", "m", `{"project":"p1","user":"alice"}`)}
	for i := range muts {
		muts[i].OpID = uuid.Must(uuid.NewV7()).String()
		muts[i].HLC = ts(1_700_000_000_000+int64(i), 0, "alice:phone")
	}
	b := r.Admit(a, muts, r.Config{}, time.UnixMilli(1_700_000_000_100), time.Minute)
	inTx(t, s.db, func(tx *sql.Tx) error { _, err := r.Apply(ctx, plain.In(tx), &b); return err })

	scoped, err := r.OpenStore(ctx, s.db, r.StoreOptions{Scopes: projectScopes(t)})
	require.NoError(t, err)
	require.Equal(t, 2, scoped.ScopesReindexed, "a and m gain p1 (m its member too); b has no scope value")
	require.NotEqual(t, plain.ID, scoped.ID, "devices resync: what they may see changed")
	grants, err := scoped.Records.Grants(ctx, "t1", "alice", projectScopes(t))
	require.NoError(t, err)
	require.Equal(t, syncproto.ScopeSet{"project": {"p1"}}, grants)

	again, err := r.OpenStore(ctx, s.db, r.StoreOptions{Scopes: projectScopes(t)})
	require.NoError(t, err)
	require.Zero(t, again.ScopesReindexed)
	require.Equal(t, scoped.ID, again.ID, "the same declarations change nothing")

	// b belongs to no value: only a grant of every value writes it.
	fix := sput("tasks", "b", `{"project":"p1"}`)
	fix.OpID, fix.HLC = uuid.Must(uuid.NewV7()).String(), ts(1_700_000_000_200, 0, "alice:phone")
	b = r.Admit(a, []syncproto.Mutation{fix}, r.Config{}, time.UnixMilli(1_700_000_000_300), time.Minute)
	var fx r.Effects
	inTx(t, s.db, func(tx *sql.Tx) (err error) { fx, err = r.Apply(ctx, again.In(tx), &b); return err })
	require.Equal(t, []string{"forbidden_scope"}, codes(fx))
	a.Grants = syncproto.ScopeSet{"project": {"*"}}
	b = r.Admit(a, []syncproto.Mutation{fix}, r.Config{}, time.UnixMilli(1_700_000_000_300), time.Minute)
	inTx(t, s.db, func(tx *sql.Tx) (err error) { fx, err = r.Apply(ctx, again.In(tx), &b); return err })
	require.Equal(t, []string{"applied"}, codes(fx))
}

// welcome describes to each principal only the models it may see: one
// that reads tasks but not the membership model members gets the scope
// without its membership (welcome's validation refuses a membership model
// the scope's listed models lack).
func TestScopeInfoDescribesOnlyTheVisibleModels(t *testing.T) {
	s := projectScopes(t)
	for _, tc := range []struct {
		name       string
		visible    []string
		membership bool
	}{
		{"both", []string{"tasks", "members"}, true},
		{"tasks only", []string{"tasks"}, false},
		{"members only", []string{"members"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := s.Info(func(m string) bool { return slices.Contains(tc.visible, m) })
			require.Len(t, info["project"].Models, len(tc.visible))
			m := info["project"].Membership
			require.Equal(t, tc.membership, m != nil)
			if m != nil {
				require.Contains(t, info["project"].Models, m.Model)
			}
		})
	}
	require.Empty(t, s.Info(func(string) bool { return false }), "a principal that sees none of its models is told of no scope")
}
