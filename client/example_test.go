package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// exampleSyncd is a syncd on a loopback port, started for the examples by
// startExampleSyncd, with the device credential of client "phone-1" (which
// may read and write every model) and a directory for the device's files.
type exampleSyncd struct {
	URL        string
	Credential string
	Dir        string
	stop       func()
}

// startExampleSyncd starts the examples' syncd; Close stops it and removes
// its files.
func startExampleSyncd() *exampleSyncd { return startScopedExampleSyncd(nil, nil) }

// startScopedExampleSyncd starts the examples' syncd declaring scopes
// (nil: none), phone-1's token granting grants.
func startScopedExampleSyncd(scopes *replication.Scopes, grants map[string][]string) *exampleSyncd {
	dir, err := os.MkdirTemp("", "syncd-example")
	if err != nil {
		log.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens.json")
	token, err := auth.Issue(tokens, auth.Principal{Tenant: "demo", ClientID: "phone-1", Read: []string{"*"}, Write: []string{"*"}, Scopes: grants}, time.Now())
	if err != nil {
		log.Fatal(err)
	}
	authn, err := auth.NewAuthenticator(tokens, nil)
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.New(context.Background(), server.Config{DataPath: filepath.Join(dir, "syncd.db"), Authenticator: authn, Scopes: scopes})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler()}
	go hs.Serve(ln)
	return &exampleSyncd{URL: "http://" + ln.Addr().String(), Credential: client.FormatCredential("phone-1", token), Dir: dir, stop: func() {
		srv.Shutdown(context.Background())
		hs.Close()
		srv.Close()
		os.RemoveAll(dir)
	}}
}

func (s *exampleSyncd) Close() { s.stop() }

// openExampleClient opens a client of s with credential, its files in a
// fresh directory under s.Dir.
func openExampleClient(s *exampleSyncd, credential string) *client.Client {
	dir, err := os.MkdirTemp(s.Dir, "device")
	if err != nil {
		log.Fatal(err)
	}
	queue, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.Open(context.Background(), client.Config{
		ServerURLs:  []string{s.URL},
		Credential:  credential,
		Queue:       queue,
		ReplicaPath: filepath.Join(dir, "replica.db"),
	})
	if err != nil {
		log.Fatal(err)
	}
	return c
}

// Open a client over a durable queue, write offline-first, and wait for the
// server's decision.
func Example() {
	srv := startExampleSyncd() // a syncd on loopback, for the example
	defer srv.Close()
	ctx := context.Background()

	queue, err := offlinequeue.OpenSQLite(filepath.Join(srv.Dir, "queue.db"), offlinequeue.SQLiteOptions{})
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.Open(ctx, client.Config{
		ServerURLs: []string{srv.URL},
		// The device credential (syncctl token issue --credential) carries
		// the client id and the token.
		Credential:  srv.Credential,
		Queue:       queue, // the client owns it now
		ReplicaPath: filepath.Join(srv.Dir, "replica.db"),
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

// Watch the client's status to show it in the app: the channel keeps only
// the newest status, so a slow reader never holds the client up.
func ExampleClient_WatchStatus() {
	srv := startExampleSyncd()
	defer srv.Close()
	c := openExampleClient(srv, srv.Credential)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watch := c.WatchStatus(ctx)
	for st := range watch {
		if st.State == client.StateIdle {
			fmt.Println("state:", st.State, "pending:", st.Pending)
			break
		}
	}
	c.Close()
	for st := range watch { // the last status says closed, then the channel ends
		fmt.Println("state:", st.State)
	}
	// Output:
	// state: idle pending: 0
	// state: closed
}

// A refused session is reported as what it is: the status turns refused
// and Sync, Await and Status carry a *RefusedError that errors.Is the
// cause, so the app can tell "sign in again" from "offline".
func Example_errorHandling() {
	srv := startExampleSyncd()
	defer srv.Close()
	revoked := client.FormatCredential("phone-1", "sdk_000000000000_revoked")
	c := openExampleClient(srv, revoked)
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	op, err := c.Put(ctx, "notes", "n1", json.RawMessage(`{"text":"hi"}`))
	if err != nil {
		log.Fatal(err)
	}
	for st := range c.WatchStatus(ctx) {
		if st.State == client.StateRefused {
			break
		}
	}
	_, err = c.Await(ctx, op)
	var refused *client.RefusedError
	errors.As(err, &refused) // the code and retry hint, when refused
	switch {
	case errors.Is(err, client.ErrUnauthorized):
		fmt.Println("sign in again; the server said", refused.Code)
	case errors.Is(err, client.ErrWrongClientID):
		fmt.Println("this token belongs to another device")
	case errors.Is(err, client.ErrServerBusy):
		fmt.Println("busy; retrying by itself after", refused.RetryAfter)
	case errors.Is(err, client.ErrOffline):
		fmt.Println("offline; the write stays queued")
	}
	st, _ := c.Status(ctx)
	fmt.Println("pending:", st.Pending, "state:", st.State)
	// Output:
	// sign in again; the server said unauthorized
	// pending: 1 state: refused
}

// Changes delivers this device's writes as they are made and the server's
// as the change feed applies them.
func ExampleClient_Changes() {
	srv := startExampleSyncd()
	defer srv.Close()
	c := openExampleClient(srv, srv.Credential)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sub := c.Changes()
	defer sub.Close()
	if _, err := c.Put(ctx, "notes", "n1", json.RawMessage(`{"text":"hi"}`)); err != nil {
		log.Fatal(err)
	}
	for ev := range sub.C {
		switch {
		case ev.Resync || ev.Lagged:
			fmt.Println("re-read everything")
		case ev.Local:
			fmt.Printf("%s/%s written on this device: %s\n", ev.Model, ev.Key, ev.Value)
		default:
			fmt.Printf("%s/%s at version %d from the server: %s\n", ev.Model, ev.Key, ev.Version, ev.Value)
			return
		}
	}
	// Output:
	// notes/n1 written on this device: {"text":"hi"}
	// notes/n1 at version 1 from the server: {"text":"hi"}
}

// A Collection reads and writes Go values instead of JSON bytes.
func ExampleCollection() {
	srv := startExampleSyncd()
	defer srv.Close()
	c := openExampleClient(srv, srv.Credential)
	defer c.Close()
	ctx := context.Background()

	type Todo struct {
		Title string `json:"title"`
		Done  bool   `json:"done"`
	}
	todos := client.NewCollection[Todo](c, "todos")
	if _, err := todos.Put(ctx, "milk", Todo{Title: "buy milk"}); err != nil {
		log.Fatal(err)
	}
	doc, _, err := todos.Get(ctx, "milk")
	var bad *client.DecodeError
	if errors.As(err, &bad) { // a value another app version wrote
		log.Fatalf("%s is not a Todo: %v", bad.Key, bad.Err)
	}
	fmt.Printf("%s: %+v pending=%v\n", doc.Key, doc.Value, doc.Pending)
	// Output:
	// milk: {Title:buy milk Done:false} pending=true
}

// Partial sync: syncd declares scope project over tasks (syncd --scope
// project=tasks.project_id) and this device's token grants p1 and p2. The
// device follows p1, adds p2 (WaitScope returns once its backfill is in),
// then drops p1, whose rows leave as ChangeEvents saying why.
func Example_partialSync() {
	scopes := &replication.Scopes{}
	if err := scopes.Set("project=tasks.project_id"); err != nil {
		log.Fatal(err)
	}
	srv := startScopedExampleSyncd(scopes, map[string][]string{"project": {"p1", "p2"}})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	queue, err := offlinequeue.OpenSQLite(filepath.Join(srv.Dir, "queue.db"), offlinequeue.SQLiteOptions{})
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.Open(ctx, client.Config{ServerURLs: []string{srv.URL}, Credential: srv.Credential, Queue: queue,
		Scopes: syncproto.ScopeSet{"project": {"p1", "p2"}}}) // without it: every granted value
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	keys := func() (out []string) {
		recs, _ := c.List(ctx, "tasks", client.ListOptions{})
		for _, r := range recs {
			out = append(out, r.Key)
		}
		return out
	}
	for key, project := range map[string]string{"t1": "p1", "t2": "p2"} {
		op, err := c.Put(ctx, "tasks", key, json.RawMessage(`{"project_id":"`+project+`"}`))
		if err != nil {
			log.Fatal(err)
		}
		if _, err := c.Await(ctx, op); err != nil {
			log.Fatal(err)
		}
	}
	if err := c.Sync(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("following p1 and p2:", keys())

	sub := c.Changes()
	defer sub.Close()
	if err := c.SetScopes(ctx, "project", "p1"); err != nil {
		log.Fatal(err)
	}
	for ev := range sub.C {
		if ev.Evicted != "" {
			fmt.Println("evicted", ev.Key+":", ev.Evicted)
			break
		}
	}
	fmt.Println("following p1:", keys())

	if err := c.SetScopes(ctx, "project", "p1", "p2"); err != nil {
		log.Fatal(err)
	}
	if err := c.WaitScope(ctx, "project", "p2"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after adding p2 again:", keys())
	// Output:
	// following p1 and p2: [t1 t2]
	// evicted t2: unsubscribed
	// following p1: [t1]
	// after adding p2 again: [t1 t2]
}
