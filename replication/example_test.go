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

// Example shows the server's duties around one pushed batch: one
// transaction for the whole batch, the Applier per mutation, commit, then
// Committed so that change-feed subscribers wake.
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

	var policies replication.Config
	if err := policies.Set("accounts=optimistic"); err != nil {
		log.Fatal(err)
	}
	resolver, err := replication.NewResolver(replication.ResolverOptions{Policies: policies})
	if err != nil {
		log.Fatal(err)
	}
	oplog, err := replication.NewSQLiteLog(ctx, db, replication.LogOptions{})
	if err != nil {
		log.Fatal(err)
	}
	records, err := replication.NewRecords(ctx, db)
	if err != nil {
		log.Fatal(err)
	}
	conflicts, err := replication.NewConflictLog(ctx, db, replication.ConflictLogOptions{})
	if err != nil {
		log.Fatal(err)
	}
	applier := replication.NewApplier(resolver, oplog, records, conflicts)

	// Two clients write the same note; the second write carries an older
	// timestamp (its device clock is behind), so it loses under LWW.
	batch := []replication.Proposal{
		{Tenant: "acme", OpID: "op-1", Model: "notes", Key: "n1", Op: replication.OpPut,
			Value: []byte(`{"title":"from phone"}`), HLC: syncproto.Timestamp{Wall: 2000, Origin: "phone"}, ClientID: "phone"},
		{Tenant: "acme", OpID: "op-2", Model: "notes", Key: "n1", Op: replication.OpPut,
			Value: []byte(`{"title":"from laptop"}`), HLC: syncproto.Timestamp{Wall: 1000, Origin: "laptop"}, ClientID: "laptop"},
	}
	now := time.UnixMilli(2500)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	var head uint64
	for _, p := range batch {
		if err := replication.CheckSkew(p.HLC, now, 0); err != nil {
			fmt.Println(p.OpID, "refused:", err) // answered as clock_skew
			continue
		}
		// (The server looks the op id up in its ledger first.)
		d, err := applier.Apply(ctx, tx, p)
		if err != nil {
			_ = tx.Rollback()
			log.Fatal(err)
		}
		// (The server records d in its ledger here.)
		if d.Outcome == replication.OutcomeApplied {
			head = d.Record.Seq
			fmt.Printf("%s %s: version %d at seq %d\n", p.OpID, d.Outcome, d.Record.Version, d.Record.Seq)
		} else {
			fmt.Printf("%s %s by %s (version %d)\n", p.OpID, d.Outcome, d.Winner.OpID, d.Winner.Version)
		}
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	oplog.Committed(head) // only after the commit

	page, err := oplog.Read(ctx, replication.ReadRequest{Scope: replication.Scope{Tenant: "acme", AllModels: true}})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range page.Entries {
		fmt.Printf("oplog %d: %s %s/%s v%d %s\n", e.Seq, e.Op, e.Model, e.Key, e.Version, e.Value)
	}
	lost, err := conflicts.List(ctx, replication.ConflictFilter{Scope: replication.Scope{Tenant: "acme", AllModels: true}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("conflict: %s lost to %s (%s)\n", lost[0].Loser.OpID, lost[0].Winner.OpID, lost[0].Reason)

	// Output:
	// op-1 applied: version 1 at seq 1
	// op-2 superseded by op-1 (version 1)
	// oplog 1: put notes/n1 v1 {"title":"from phone"}
	// conflict: op-2 lost to op-1 (hlc not newer than current)
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
