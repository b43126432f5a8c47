// Command notes is a tiny terminal notes app built on the syncd client: it
// works offline (every command reads and writes the device's own queue and
// replica) and syncs when the server is reachable.
//
//	notes [flags] add KEY TEXT   write a note (offline is fine), push it if online
//	notes [flags] rm KEY         delete a note, push it if online
//	notes [flags] ls             list notes, marking the ones not yet synced
//	notes [flags] sync           wait for the server, replay, show the outcome
//	notes [flags] status         state, queue depth, dead letters, last sync
//	notes [flags] share NOTEBOOK USER    let USER's devices hold NOTEBOOK
//	notes [flags] unshare NOTEBOOK USER  take NOTEBOOK off USER's devices
//
// Shared notebooks: with --notebook, add writes the note into a notebook.
// A syncd that declares the notebook scope (PROTOCOL.md section 19)
//
//	syncd --scope notebook=notes.notebook,members.notebook --membership notebook=members:user
//
// gives each device only the notebooks its user is a member of: share
// writes a membership row (the first one founds the notebook), unshare
// deletes it, and the notebook's notes leave that user's devices on their
// next sync (ls no longer lists them; status says the notebook was
// revoked).
//
// When the server refuses the device (a wrong or revoked token, a token of
// another client id), add, rm and sync say so at once, with the server's
// reason, instead of waiting for a server that will never take the writes.
//
// With `make run` in another terminal, the development token it logged works:
//
//	go run ./examples/notes --token sdk_... add shopping "milk, eggs"
//	go run ./examples/notes --token sdk_... sync
//
// A device credential (syncctl token issue --credential) replaces --token
// and --client-id: --credential sdc_phone-1@sdk_... or $NOTES_CREDENTIAL.
//
// A JWT (syncd with --jwt-*) comes from a file, read again whenever the
// client needs a fresh token, and the client id is a device of the token's
// user (PROTOCOL.md section 1.1):
//
//	syncctl jwt sign --sub alice --tenant dev > var/alice.jwt
//	go run ./examples/notes --jwt var/alice.jwt --client-id alice:laptop add k v
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
	"strings"
	"text/tabwriter"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/textsafe"
	"github.com/syncd-dev/syncd/syncproto"
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
	Text     string `json:"text"`
	Notebook string `json:"notebook,omitempty"`
}

// membersModel holds the notebook memberships: key NOTEBOOK/USER, value
// {"notebook": NOTEBOOK, "user": USER}.
const membersModel = "members"

// notebookScope is the scope syncd declares over notebooks.
const notebookScope = "notebook"

type member struct {
	Notebook string `json:"notebook"`
	User     string `json:"user"`
}

// usage is what --help prints above the flags.
const usage = `usage: notes [flags] COMMAND

Commands:
  add KEY TEXT   write a note (offline is fine), push it if online
  rm KEY         delete a note, push it if online
  ls             list notes, marking the ones not yet synced
  sync           wait for the server, replay, show the outcome
  status         state, queue depth, dead letters, last sync
  share NOTEBOOK USER    let USER's devices hold NOTEBOOK
  unshare NOTEBOOK USER  take NOTEBOOK off USER's devices

Flags:
`

// run runs one command. --help prints the usage on stdout and is no error
// (exit status 0).
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("notes", flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprint(stdout, usage)
		fs.PrintDefaults()
	}
	server := fs.String("server", "http://127.0.0.1:8080", "syncd URL; several (a cluster's nodes) comma-separated")
	credential := fs.String("credential", os.Getenv("NOTES_CREDENTIAL"), "device credential, client id and token in one (default $NOTES_CREDENTIAL); replaces --token and --client-id")
	token := fs.String("token", os.Getenv("NOTES_TOKEN"), "bearer token (default $NOTES_TOKEN)")
	clientID := fs.String("client-id", "dev-client", "the client id the token acts as")
	jwtFile := fs.String("jwt", "", "file holding a JWT (syncctl jwt sign), read whenever a fresh token is needed; replaces --token; --client-id is then USER:DEVICE")
	dir := fs.String("dir", "var/notes", "where this device keeps its queue and replica")
	wait := fs.Duration("wait", 30*time.Second, "how long add, rm and sync wait for the server")
	notebook := fs.String("notebook", "", "with add: the notebook the note goes into (shared with share)")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("want a command: add, rm, ls, sync, status, share or unshare (see --help)")
	}
	urls, err := serverURLs(*server)
	if err != nil {
		return err
	}
	cfg := client.Config{
		ServerURLs: urls, Token: *token, ClientID: *clientID,
		ReplicaPath: filepath.Join(*dir, "replica.db"), ProbeInterval: 500 * time.Millisecond,
	}
	if *credential != "" {
		cfg.Credential, cfg.Token, cfg.ClientID = *credential, "", ""
	}
	if *jwtFile != "" {
		cfg.Token, cfg.TokenSource = "", func(context.Context) (string, error) {
			b, err := os.ReadFile(*jwtFile)
			return strings.TrimSpace(string(b)), err
		}
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	queue, err := offlinequeue.OpenFile(filepath.Join(*dir, "queue.ndjson"), offlinequeue.FileOptions{})
	if err != nil {
		return err
	}
	cfg.Queue = queue // the client owns it, also when Open fails
	c, err := client.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	waitCtx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()

	cmd, rest := fs.Arg(0), fs.Args()[1:]
	switch {
	case cmd == "add" && len(rest) == 2:
		value, _ := json.Marshal(note{Text: rest[1], Notebook: *notebook})
		op, err := c.Put(ctx, model, rest[0], value)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "saved %s (op %s)\n", textsafe.Escape(rest[0]), op)
		return push(waitCtx, c, op, stdout)
	case cmd == "rm" && len(rest) == 1:
		op, err := c.Delete(ctx, model, rest[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %s (op %s)\n", textsafe.Escape(rest[0]), op)
		return push(waitCtx, c, op, stdout)
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
			if n.Notebook != "" {
				mark = strings.TrimSpace("[" + textsafe.Escape(n.Notebook) + "] " + mark)
			}
			// Notes synced from other devices are untrusted text.
			fmt.Fprintf(tw, "%s\t%s\t%s\n", textsafe.Escape(r.Key), textsafe.Escape(n.Text), mark)
		}
		tw.Flush()
	case cmd == "sync" && len(rest) == 0:
		if err := syncNow(waitCtx, c, *wait); err != nil {
			return err
		}
		return printStatus(ctx, c, stdout)
	case cmd == "status" && len(rest) == 0:
		return printStatus(ctx, c, stdout)
	case (cmd == "share" || cmd == "unshare") && len(rest) == 2:
		return share(ctx, waitCtx, c, cmd == "share", rest[0], rest[1], stdout)
	default:
		return fmt.Errorf("unknown command or wrong arguments: %q", fs.Args())
	}
	return nil
}

// push waits, within ctx, for the server's decision on op while the server
// is reachable. Offline it says the note stays queued; refused, it returns
// the server's reason (a *client.RefusedError).
func push(ctx context.Context, c *client.Client, op string, stdout io.Writer) error {
	for st := range c.WatchStatus(ctx) {
		switch st.State {
		case client.StateRefused:
			return fmt.Errorf("not synced, the server refused this device: %w", st.LastError)
		case client.StateOffline:
			fmt.Fprintln(stdout, "offline: it syncs when the server is reachable")
			return nil
		}
		if o, found, err := c.Lookup(ctx, op); err != nil || found {
			if err == nil {
				fmt.Fprintf(stdout, "synced: %s\n", describe(o))
			}
			return err
		}
	}
	fmt.Fprintln(stdout, "not synced yet: it syncs when the server is reachable")
	return nil
}

// syncNow waits, within ctx, for a connection and replays the queue once.
// A refusal ends it at once with the server's reason.
func syncNow(ctx context.Context, c *client.Client, wait time.Duration) error {
	err := c.WaitConnected(ctx)
	if err == nil {
		if err := c.Sync(ctx); err != nil {
			return err
		}
		return waitNotebooks(ctx, c)
	}
	var refused *client.RefusedError
	if errors.As(err, &refused) {
		return fmt.Errorf("cannot sync, the server refused this device: %w", err)
	}
	st, _ := c.Status(context.WithoutCancel(ctx))
	if st.LastError != nil {
		return fmt.Errorf("no sync within %s (%s: %w); your notes stay queued", wait, st.State, st.LastError)
	}
	return fmt.Errorf("server not reachable within %s (%s); your notes stay queued", wait, st.State)
}

// waitNotebooks waits, within ctx, for the notebooks being backfilled to
// be in (a notebook the server refuses is reported by status, not here).
func waitNotebooks(ctx context.Context, c *client.Client) error {
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	for _, s := range st.Scopes {
		if s.State != client.ScopeBackfilling {
			continue
		}
		var se *client.ScopeError
		if err := c.WaitScope(ctx, s.Scope, s.Value); err != nil && !errors.As(err, &se) {
			return err
		}
	}
	return nil
}

// describe says how a write ended.
func describe(o client.Outcome) string {
	switch o.Status {
	case client.StatusApplied:
		return fmt.Sprintf("applied as version %d", o.Version)
	case client.StatusDeadLettered:
		return "refused for good: " + textsafe.Escape(o.Reason)
	}
	return string(o.Status)
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
	fmt.Fprintf(w, "%s: pending %d, dead letters %d, last sync %s, cursor %d\n", st.State, st.Pending, st.DeadLetters, last, st.Cursor)
	if st.LastError != nil {
		fmt.Fprintf(w, "the server refused this device: %v\n", st.LastError)
	}
	for _, s := range st.Scopes {
		if s.Scope == notebookScope {
			fmt.Fprintf(w, "notebook %s: %s\n", textsafe.Escape(s.Value), s.State)
		}
	}
	return nil
}

// share writes (or, unsharing, deletes) user's membership of notebook and
// pushes it as add does.
func share(ctx, waitCtx context.Context, c *client.Client, grant bool, notebook, user string, stdout io.Writer) error {
	key := notebook + "/" + user
	var op string
	var err error
	if grant {
		value, _ := json.Marshal(member{Notebook: notebook, User: user})
		op, err = c.Put(ctx, membersModel, key, value)
	} else {
		op, err = c.Delete(ctx, membersModel, key)
	}
	if err != nil {
		return err
	}
	verb := "shared"
	if !grant {
		verb = "unshared"
	}
	fmt.Fprintf(stdout, "%s %s with %s (op %s)\n", verb, textsafe.Escape(notebook), textsafe.Escape(user), op)
	return push(waitCtx, c, op, stdout)
}

// serverURLs splits --server's comma-separated list; a URL that is not one
// is an error naming the flag.
func serverURLs(list string) ([]string, error) {
	var urls []string
	for _, u := range strings.Split(list, ",") {
		u = strings.TrimSpace(u)
		if err := syncproto.ValidateServerURL(u); err != nil {
			return nil, fmt.Errorf("--server: %w", err)
		}
		urls = append(urls, u)
	}
	return urls, nil
}
