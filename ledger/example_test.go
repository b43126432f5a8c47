package ledger_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/syncd-dev/syncd/ledger"
)

// The apply path: one transaction per batch, a lookup before each op, the
// decision recorded beside the op's effect.
func ExampleSQL() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ledger-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "syncd.db")+
		"?_busy_timeout=5000&_synchronous=FULL&_journal_mode=WAL&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	day := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := day // the server's clock, which decides
	// The ledger's tables are made by its migrations, run once each, in
	// order, among the database's own (syncd records which ran in PRAGMA
	// user_version).
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	for _, step := range ledger.Migrations() {
		if err := step(ctx, tx); err != nil {
			panic(err)
		}
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	l, err := ledger.NewSQL(ctx, db, ledger.Options{MaxAge: 24 * time.Hour, Now: func() time.Time { return clock }})
	if err != nil {
		panic(err)
	}

	type op struct {
		id      string
		at      time.Time // the wall part of the op's HLC
		payload string
	}
	apply := func(tenant string, batch ...op) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // a no-op after Commit
		lt := l.In(tx)
		for _, o := range batch {
			digest := sha256.Sum256([]byte(o.payload))
			d, outcome, err := lt.Lookup(ctx, tenant, o.id, o.at)
			if err != nil {
				return err
			}
			switch outcome {
			case ledger.Hit:
				fmt.Printf("%s: replayed %q\n", o.id, d.Result)
				continue
			case ledger.Expired:
				fmt.Printf("%s: refused, expired\n", o.id)
				continue
			}
			result := "applied " + o.payload // the op's effect goes through tx here
			if err := lt.Record(ctx, ledger.Decision{
				Scope: tenant, OpID: o.id, OpTime: o.at, Digest: digest[:], Result: []byte(result),
			}); err != nil {
				return err
			}
			fmt.Printf("%s: %s\n", o.id, result)
		}
		return tx.Commit()
	}

	if err := apply("tenant-a", op{"op-1", day, "x=1"}, op{"op-2", day.Add(time.Hour), "y=2"}); err != nil {
		panic(err)
	}
	// The connection dropped before the answer arrived; the client resends.
	if err := apply("tenant-a", op{"op-1", day, "x=1"}); err != nil {
		panic(err)
	}
	// Two days later retention has evicted both, and tenant-a's floor is
	// op-2's time. A late op-3 stamped before it cannot be told from an
	// evicted op, so it is refused; tenant-b's floor is its own, so the same
	// stamp is new there.
	clock = day.Add(48 * time.Hour)
	evicted, err := l.Prune(ctx, clock)
	if err != nil {
		panic(err)
	}
	floor, err := l.Floor(ctx, "tenant-a")
	if err != nil {
		panic(err)
	}
	fmt.Println("evicted", evicted, "floor of tenant-a", floor.Format(time.Kitchen))
	if err := apply("tenant-a", op{"op-3", day.Add(30 * time.Minute), "z=3"}); err != nil {
		panic(err)
	}
	if err := apply("tenant-b", op{"op-3", day.Add(30 * time.Minute), "z=3"}); err != nil {
		panic(err)
	}
	// Output:
	// op-1: applied x=1
	// op-2: applied y=2
	// op-1: replayed "applied x=1"
	// evicted 2 floor of tenant-a 1:00AM
	// op-3: refused, expired
	// op-3: applied z=3
}
