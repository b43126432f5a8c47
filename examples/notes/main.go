// Command notes is a tiny terminal notes app built on the syncd client: it
// works offline (every command reads and writes the device's own queue and
// replica) and syncs when the server is reachable.
//
//	notes [flags] add KEY TEXT   write a note (offline is fine)
//	notes [flags] rm KEY         delete a note
//	notes [flags] ls             list notes, marking the ones not yet synced
//	notes [flags] sync           wait for the server, replay, show the outcome
//	notes [flags] status         queue depth, dead letters, last sync
//
// With `make run` in another terminal, the development token it logged works:
//
//	go run ./examples/notes --token sdk_... add shopping "milk, eggs"
//	go run ./examples/notes --token sdk_... sync
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/textsafe"
)

const model = "notes"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "notes:", err)
		os.Exit(1)
	}
}

type note struct {
	Text string `json:"text"`
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("notes", flag.ContinueOnError)
	server := fs.String("server", "http://127.0.0.1:8080", "syncd URL")
	token := fs.String("token", os.Getenv("NOTES_TOKEN"), "bearer token (default $NOTES_TOKEN)")
	clientID := fs.String("client-id", "dev-client", "the client id the token acts as")
	dir := fs.String("dir", "var/notes", "where this device keeps its queue and replica")
	wait := fs.Duration("wait", 30*time.Second, "how long sync waits for the server")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("want a command: add, rm, ls, sync or status")
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	queue, err := offlinequeue.OpenFile(filepath.Join(*dir, "queue.ndjson"), offlinequeue.FileOptions{})
	if err != nil {
		return err
	}
	c, err := client.Open(ctx, client.Config{
		ServerURLs: []string{*server}, Token: *token, ClientID: *clientID,
		Queue: queue, ReplicaPath: filepath.Join(*dir, "replica.db"),
		ProbeInterval: 500 * time.Millisecond,
	})
	if err != nil {
		queue.Close()
		return err
	}
	defer c.Close()

	cmd, rest := fs.Arg(0), fs.Args()[1:]
	switch {
	case cmd == "add" && len(rest) == 2:
		value, _ := json.Marshal(note{Text: rest[1]})
		op, err := c.Put(ctx, model, rest[0], value)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "saved %s (op %s); it syncs when the server is reachable\n", textsafe.Escape(rest[0]), op)
	case cmd == "rm" && len(rest) == 1:
		if _, err := c.Delete(ctx, model, rest[0]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %s\n", textsafe.Escape(rest[0]))
	case cmd == "ls" && len(rest) == 0:
		recs, err := c.List(ctx, model, client.ListOptions{})
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, r := range recs {
			var n note
			json.Unmarshal(r.Value, &n)
			mark := ""
			if r.Pending {
				mark = "(not synced)"
			}
			// Notes synced from other devices are untrusted text.
			fmt.Fprintf(tw, "%s\t%s\t%s\n", textsafe.Escape(r.Key), textsafe.Escape(n.Text), mark)
		}
		tw.Flush()
	case cmd == "sync" && len(rest) == 0:
		waitCtx, cancel := context.WithTimeout(ctx, *wait)
		defer cancel()
		for {
			err := c.Sync(waitCtx)
			if err == nil {
				break
			}
			if !errors.Is(err, client.ErrOffline) {
				return err
			}
			select {
			case <-waitCtx.Done():
				return fmt.Errorf("server not reachable within %s; your notes stay queued", *wait)
			case <-time.After(200 * time.Millisecond):
			}
		}
		return printStatus(ctx, c, stdout)
	case cmd == "status" && len(rest) == 0:
		return printStatus(ctx, c, stdout)
	default:
		return fmt.Errorf("unknown command or wrong arguments: %q", fs.Args())
	}
	return nil
}

func printStatus(ctx context.Context, c *client.Client, w io.Writer) error {
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	last := "never"
	if !st.LastSync.IsZero() {
		last = st.LastSync.Format(time.RFC3339)
	}
	fmt.Fprintf(w, "pending %d, dead letters %d, last sync %s, cursor %d\n", st.Pending, st.DeadLetters, last, st.Cursor)
	return nil
}
