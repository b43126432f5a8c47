package offlinequeue_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

func ExampleOpenSQLite() {
	dir, err := os.MkdirTemp("", "outbox")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "outbox.db"), offlinequeue.SQLiteOptions{
		Options: offlinequeue.Options{MaxDepth: 10_000},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()

	// The app records each write with an idempotency key it minted once
	// for the operation; enqueueing the same operation again is harmless.
	first, err := q.Enqueue(ctx, []byte(`{"put":"notes/1","body":"hello"}`), "op-7f3c")
	if err != nil {
		log.Fatal(err)
	}
	again, err := q.Enqueue(ctx, []byte(`{"put":"notes/1","body":"hello"}`), "op-7f3c")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, []byte(`{"delete":"notes/2"}`), "op-80a1"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("same operation, same item:", first == again)

	// The sync worker pages through the queue and marks what it delivered.
	var after offlinequeue.ID
	for {
		page, err := q.Peek(ctx, after, 100)
		if err != nil {
			log.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, it := range page {
			fmt.Printf("deliver %s (key %s)\n", it.Payload, it.Key)
			if err := q.MarkDone(ctx, it.ID); err != nil {
				log.Fatal(err)
			}
			after = it.ID
		}
	}
	n, err := q.Len(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pending:", n)
	// Output:
	// same operation, same item: true
	// deliver {"put":"notes/1","body":"hello"} (key op-7f3c)
	// deliver {"delete":"notes/2"} (key op-80a1)
	// pending: 0
}
