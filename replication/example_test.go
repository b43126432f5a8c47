package replication_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// Example shows the two halves of deciding a push: the edge admits it
// (Admit: the token, the clock), then the state machine decides the batch
// in one transaction (Apply over a Store), and only after the commit are
// the change feed's waiters woken (Committed).
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "replication-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "syncd.db")+"?_busy_timeout=5000&_synchronous=FULL&_journal_mode=WAL")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := replication.OpenStore(ctx, db, replication.StoreOptions{})
	if err != nil {
		log.Fatal(err)
	}
	var policies replication.Config
	if err := policies.Set("accounts=optimistic"); err != nil {
		log.Fatal(err)
	}
	now := time.UnixMilli(2500)
	everything := func(string) bool { return true }
	note := func(op, title string, wall int64, origin string) syncproto.Mutation {
		return syncproto.Mutation{OpID: op, Model: "notes", Key: "n1", Op: syncproto.OpPut,
			Value: []byte(`{"title":"` + title + `"}`), HLC: syncproto.Timestamp{Wall: wall, Origin: origin}}
	}

	// Two devices write the same note; the laptop's clock is behind, so its
	// write carries an older timestamp and loses under LWW. The second
	// laptop write is a minute and more ahead of the server: refused.
	pushes := []struct {
		author replication.Author
		muts   []syncproto.Mutation
	}{
		{replication.Author{Tenant: "acme", ClientID: "phone", CanWrite: everything},
			[]syncproto.Mutation{note("0193a1f0-5c1e-7a4b-9d2e-000000000001", "from phone", 2000, "phone")}},
		{replication.Author{Tenant: "acme", ClientID: "laptop", CanWrite: everything},
			[]syncproto.Mutation{note("0193a1f0-5c1e-7a4b-9d2e-000000000002", "from laptop", 1000, "laptop"),
				note("0193a1f0-5c1e-7a4b-9d2e-000000000003", "from the future", 90_000, "laptop")}},
	}
	for _, push := range pushes {
		b := replication.Admit(push.author, push.muts, policies, now, replication.DefaultMaxClockSkew)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		fx, err := replication.Apply(ctx, store.In(tx), &b)
		if err != nil {
			_ = tx.Rollback()
			log.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			log.Fatal(err)
		}
		if n := len(fx.Entries); n > 0 {
			store.Committed(fx.Entries[n-1].Seq) // only after the commit
		}
		for _, res := range fx.Results {
			if res.Code != "" {
				fmt.Println(res.OpID[len(res.OpID)-1:], res.Status, res.Code)
				continue
			}
			fmt.Println(res.OpID[len(res.OpID)-1:], res.Status)
		}
	}

	page, err := store.Log.Read(ctx, replication.ReadRequest{Scope: replication.Scope{Tenant: "acme", AllModels: true}})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range page.Entries {
		fmt.Printf("oplog %d: %s %s/%s v%d %s\n", e.Seq, e.Op, e.Model, e.Key, e.Version, e.Value)
	}
	lost, err := store.Conflicts.List(ctx, replication.ConflictFilter{Scope: replication.Scope{Tenant: "acme", AllModels: true}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("conflict: a write lost to v%d (%s)\n", lost[0].Winner.Version, lost[0].Reason)

	// Output:
	// 1 applied
	// 2 superseded
	// 3 rejected clock_skew
	// oplog 1: put notes/n1 v1 {"title":"from phone"}
	// conflict: a write lost to v1 (hlc not newer than current)
}

// ExampleCheckSkew shows the refusal a client with a clock running ahead
// gets.
func ExampleCheckSkew() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ahead := syncproto.Timestamp{Wall: now.Add(5 * time.Minute).UnixMilli(), Origin: "phone"}
	err := replication.CheckSkew(ahead, now, replication.DefaultMaxClockSkew)
	fmt.Println(err)
	// Output:
	// clock skew: hlc is 5m0s ahead of the server clock, more than the 1m0s allowed
}
