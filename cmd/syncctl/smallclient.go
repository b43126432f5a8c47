package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/syncproto"
)

// defaultSyncURL is syncd's default public listener (syncd --listen).
const defaultSyncURL = "http://127.0.0.1:8080"

// clientFlags are the flags of put, get and watch: who the small client is
// and where it keeps its state.
type clientFlags struct {
	state   string
	timeout time.Duration
}

func addClientFlags(cmd *cobra.Command) *clientFlags {
	f := &clientFlags{}
	fl := cmd.Flags()
	fl.String("url", defaultSyncURL, "syncd's public URL; several (a cluster's nodes) comma-separated (env SYNCCTL_SYNC_URL)")
	fl.String("token", "", "a client token (env SYNCCTL_CLIENT_TOKEN; prefer the environment, flags show in ps)")
	fl.String("client-id", "", "the client id the token acts as (env SYNCCTL_CLIENT_ID)")
	fl.String("credential", "", "a device credential, client id and token in one (syncctl token issue --credential; env SYNCCTL_CLIENT_CREDENTIAL), instead of --token and --client-id")
	fl.StringVar(&f.state, "state", "", "directory for the device's queue and replica; default a temporary one, removed on exit")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the server")
	return f
}

// device is the small client: a client.Client over a SQLite queue and a
// replica in a state directory.
type device struct {
	c       *client.Client
	url     string
	id      string
	dir     string
	scratch bool // dir is temporary and removed by Close
}

// openDevice checks the server and the token, then opens the client. A
// server that cannot be reached or refuses the token is an error here,
// before any state is written.
func (a *app) openDevice(ctx context.Context, cmd *cobra.Command, f *clientFlags) (*device, error) {
	base := strings.TrimRight(a.setting(cmd.Flags(), "url", "SYNCCTL_SYNC_URL"), "/")
	token := a.setting(cmd.Flags(), "token", "SYNCCTL_CLIENT_TOKEN")
	id := a.setting(cmd.Flags(), "client-id", "SYNCCTL_CLIENT_ID")
	if cred := a.setting(cmd.Flags(), "credential", "SYNCCTL_CLIENT_CREDENTIAL"); cred != "" {
		var err error
		if id, token, err = client.ParseCredential(cred); err != nil {
			return nil, failf(exitUsage, "--credential: %v", err)
		}
	}
	switch {
	case token == "":
		return nil, failf(exitUsage, "a client token is required: set SYNCCTL_CLIENT_TOKEN or pass --token")
	case syncproto.ValidateID(id) != nil:
		return nil, failf(exitUsage, "--client-id %q: the client id the token acts as is required (env SYNCCTL_CLIENT_ID)", id)
	case f.timeout <= 0:
		return nil, failf(exitUsage, "--timeout must be positive")
	}
	// --url may list several servers (a cluster's nodes), comma-separated:
	// each must be one, and the first that answers is checked.
	var bases []string
	for _, b := range strings.Split(base, ",") {
		b = strings.TrimRight(strings.TrimSpace(b), "/")
		if _, err := websocketURL(b); err != nil {
			return nil, err
		}
		bases = append(bases, b)
	}
	var err error
	for _, b := range bases {
		wsURL, _ := websocketURL(b)
		if err = preflight(ctx, b, wsURL, token, id, f.timeout); err == nil || ExitCode(err) != exitUnreachable {
			base = b
			break
		}
	}
	if err != nil {
		return nil, err
	}
	d := &device{url: base, id: id, dir: f.state}
	if d.dir == "" {
		if d.dir, err = os.MkdirTemp("", "syncctl-device-"); err != nil {
			return nil, failf(exitFailure, "make a state directory: %v", err)
		}
		d.scratch = true
	} else if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return nil, failf(exitFailure, "state directory: %v", err)
	}
	q, err := offlinequeue.OpenSQLite(filepath.Join(d.dir, "queue.db"), offlinequeue.SQLiteOptions{})
	if err == nil {
		d.c, err = client.Open(ctx, client.Config{
			ServerURLs: bases, Token: token, ClientID: id, Queue: q,
			ReplicaPath: filepath.Join(d.dir, "replica.db"),
		})
		if err != nil {
			q.Close()
		}
	}
	if err != nil {
		d.removeScratch()
		return nil, failf(exitFailure, "open the client: %v", err)
	}
	return d, nil
}

// Close stops the client and removes a temporary state directory.
func (d *device) Close() error {
	return errors.Join(d.c.Close(), d.removeScratch())
}

func (d *device) removeScratch() error {
	if !d.scratch {
		return nil
	}
	return os.RemoveAll(d.dir)
}

// waitSynced waits, at most timeout, until the client has bound a
// connection (loading a snapshot into a fresh replica) and replayed its
// queue once. It stops at the first refusal the server gives (exit 4 for
// a refused token or a token of another client id), and at once on a busy
// server whose retry hint is beyond the timeout, instead of waiting out the
// timeout.
func (d *device) waitSynced(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	var last error
	for st := range d.c.WatchStatus(ctx) {
		if err := refusalFailure(d.url, st.LastError, time.Until(deadline)); err != nil {
			return err
		}
		if st.LastError != nil {
			last = st.LastError
		}
		if !st.Connected {
			continue
		}
		err := d.c.Sync(ctx)
		if err == nil {
			return nil
		}
		if err := refusalFailure(d.url, err, time.Until(deadline)); err != nil {
			return err
		}
		if !errors.Is(err, client.ErrOffline) && ctx.Err() == nil {
			last = err
		}
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err()
	}
	return failf(exitUnreachable, "no sync with %s within %s (last: %v)", d.url, timeout, last)
}

// refusalFailure turns the server's refusal of the session into the
// command's failure: one only the user can fix (a refused token, a token of
// another client id, an incompatible server) at once, a transient one
// (busy) only when its retry hint is beyond left. It is nil for any other
// err.
func refusalFailure(base string, err error, left time.Duration) error {
	var re *client.RefusedError
	if !errors.As(err, &re) {
		return nil
	}
	switch {
	case errors.Is(re, client.ErrUnauthorized):
		return failf(exitUnauthorized, "syncd at %s refused the client token (wrong, revoked, or an admin token): %v", base, re)
	case errors.Is(re, client.ErrWrongClientID):
		return failf(exitUnauthorized, "syncd at %s: %v (set --client-id)", base, re)
	case re.Transient() && re.RetryAfter > left:
		return failf(exitUnreachable, "syncd at %s is busy: %v", base, re)
	case re.Transient():
		return nil
	}
	return failf(exitFailure, "syncd at %s: %v", base, re)
}

// websocketURL checks a syncd base URL and returns its sync endpoint.
func websocketURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err == nil {
		switch u.Scheme {
		case "http", "ws":
			u.Scheme = "ws"
		case "https", "wss":
			u.Scheme = "wss"
		default:
			err = errors.New("want http(s):// or ws(s)://")
		}
	}
	if err != nil || u.Host == "" {
		return "", failf(exitUsage, "--url %q: want syncd's public base URL, like %s", base, defaultSyncURL)
	}
	return u.String() + syncproto.SyncPath, nil
}

// preflight opens one websocket session and says hello as clientID, so an
// unreachable server, a refused token or a token for another client id is a
// clear error instead of a client retrying in the background.
func preflight(ctx context.Context, base, wsURL, token, clientID string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{
		Subprotocols: []string{syncproto.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + token}},
	})
	switch {
	case err == nil:
		defer conn.CloseNow()
		return hello(ctx, conn, base, clientID)
	case resp != nil && resp.StatusCode == http.StatusUnauthorized:
		return failf(exitUnauthorized, "syncd at %s refused the client token (wrong, revoked, or an admin token)", base)
	case errors.Is(ctx.Err(), context.Canceled):
		return ctx.Err()
	case resp != nil:
		return failf(exitFailure, "syncd at %s refused the connection: %s", base, resp.Status)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return failf(exitUnreachable, "syncd at %s is unreachable: %v", base, err)
}

// hello says hello on conn and closes it once welcomed.
func hello(ctx context.Context, conn *websocket.Conn, base, clientID string) error {
	frame, err := syncproto.Encode(&syncproto.Hello{ID: "preflight", ClientID: clientID, HLC: syncproto.Timestamp{Wall: time.Now().UnixMilli(), Origin: clientID}})
	if err != nil {
		return failf(exitUsage, "hello as %s: %v", clientID, err)
	}
	if err := conn.Write(ctx, websocket.MessageText, frame); err != nil {
		return failf(exitUnreachable, "syncd at %s closed the connection: %v", base, err)
	}
	_, answer, err := conn.Read(ctx)
	if err != nil {
		return failf(exitUnreachable, "syncd at %s did not answer hello: %v", base, err)
	}
	msg, err := syncproto.Decode(answer)
	if err != nil {
		return failf(exitFailure, "syncd at %s answered hello with an unreadable frame: %v", base, err)
	}
	switch m := msg.(type) {
	case *syncproto.Welcome:
		return conn.Close(websocket.StatusNormalClosure, "syncctl preflight")
	case *syncproto.Error:
		if m.Code == syncproto.CodeWrongClientID {
			return failf(exitUnauthorized, "syncd at %s: %s (set --client-id)", base, m.Message)
		}
		return failf(exitFailure, "syncd at %s refused hello: %s: %s", base, m.Code, m.Message)
	}
	return failf(exitFailure, "syncd at %s answered hello with %s", base, msg.Type())
}

// describeOutcome says in words how a write ended.
func describeOutcome(o client.Outcome) string {
	switch o.Status {
	case client.StatusApplied:
		return fmt.Sprintf("applied as version %d (seq %d)", o.Version, o.Seq)
	case client.StatusSuperseded, client.StatusConflict:
		v := uint64(0)
		if o.Winner != nil {
			v = o.Winner.Version
		}
		what := "superseded by"
		if o.Status == client.StatusConflict {
			what = "conflict with"
		}
		return fmt.Sprintf("%s version %d", what, v)
	case client.StatusDeadLettered:
		return "dead-lettered: " + o.Reason
	}
	return string(o.Status)
}
