package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
)

// exampleServer starts a syncd on a loopback port for the examples and
// returns its URL, a token for client "phone-1" and a stop function.
func exampleServer(dir string) (url, token string, stop func()) {
	tokens := filepath.Join(dir, "tokens.json")
	token, err := auth.Issue(tokens, auth.Principal{Tenant: "demo", ClientID: "phone-1", Read: []string{"*"}, Write: []string{"*"}}, time.Now())
	if err != nil {
		log.Fatal(err)
	}
	authn, err := auth.NewAuthenticator(tokens, nil)
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.New(context.Background(), server.Config{DataPath: filepath.Join(dir, "syncd.db"), Authenticator: authn})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler()}
	go hs.Serve(ln)
	return "http://" + ln.Addr().String(), token, func() {
		srv.Shutdown(context.Background())
		hs.Close()
		srv.Close()
	}
}

// Open a client over a durable queue, write offline-first, and wait for the
// server's decision.
func Example() {
	dir, _ := os.MkdirTemp("", "syncd-example")
	defer os.RemoveAll(dir)
	url, token, stop := exampleServer(dir)
	defer stop()
	ctx := context.Background()

	queue, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.Open(ctx, client.Config{
		ServerURLs:  []string{url},
		Token:       token,
		ClientID:    "phone-1",
		Queue:       queue, // the client owns it now
		ReplicaPath: filepath.Join(dir, "replica.db"),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Put returns once the write is durable on the device: no network.
	op, err := c.Put(ctx, "notes", "groceries", json.RawMessage(`{"text":"milk, eggs"}`))
	if err != nil {
		log.Fatal(err)
	}
	rec, _, _ := c.Get(ctx, "notes", "groceries")
	fmt.Println("read your write:", string(rec.Value), "pending:", rec.Pending)

	// Await returns the write's durable outcome once the server decided.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	o, err := c.Await(ctx, op)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("outcome:", o.Status, "version", o.Version)
	// Output:
	// read your write: {"text":"milk, eggs"} pending: true
	// outcome: applied version 1
}

// A conflict handler decides what happens when an optimistic write loses:
// here it appends its text to the winner's and rebases onto it.
func ExampleConflictHandler() {
	merge := func(ctx context.Context, c client.Conflict) client.Resolution {
		var mine, theirs struct{ Text string }
		if c.Delete || json.Unmarshal(c.Value, &mine) != nil || json.Unmarshal(c.Winner.Value, &theirs) != nil {
			return client.Drop()
		}
		merged, err := json.Marshal(struct{ Text string }{theirs.Text + "\n" + mine.Text})
		if err != nil {
			return client.Drop()
		}
		return client.Rebase(merged)
	}
	_ = client.Config{ConflictHandler: merge}
}
