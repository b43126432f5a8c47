package soak

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/client/reconnect"
	"github.com/syncd-dev/syncd/soak/checker"
	"github.com/syncd-dev/syncd/soak/journal"
)

// childEnv names the environment variable that makes a soak binary (or a
// test binary whose TestMain calls Child) run as a client: its value is the
// path of the client's configuration file.
const childEnv = "SYNCD_SOAK_CHILD"

// Commands the harness writes to a client's stdin, one per line.
const (
	cmdQuiesce = "quiesce" // stop writing; keep syncing
	cmdStop    = "stop"    // close the client cleanly and exit 0
)

// statusEvery is how often a client reports its status on stdout.
const statusEvery = 200 * time.Millisecond

// maxRebaseDepth bounds a chain of rebases: a write rebased this many
// times is dropped on its next conflict.
const maxRebaseDepth = 3

// childConfig is what the harness hands a client process, as a JSON file.
type childConfig struct {
	Profile        profile
	Token          string
	ServerURLs     []string
	QueuePath      string
	ReplicaPath    string
	JournalPath    string
	Incarnation    int
	Seed           int64
	WriteEvery     time.Duration
	Keys, HotKeys  int
	ForgetAttempts bool
	// Users are the scoped clients' users, whom a scoped client grants
	// and revokes projects (membership churn).
	Users []string
}

// childStatus is one status line a client writes on stdout.
type childStatus struct {
	At          time.Time `json:"at"`
	Incarnation int       `json:"incarnation"`
	Pending     int       `json:"pending"`
	DeadLetters int       `json:"dead_letters"`
	Cursor      uint64    `json:"cursor"`
	Connected   bool      `json:"connected"`
	Online      bool      `json:"online"`
	Writes      int       `json:"writes"`
	Failed      int       `json:"failed"`
	Quiescing   bool      `json:"quiescing"`
	Err         string    `json:"err,omitempty"`
}

// Child runs this process as a soak client when the harness started it as
// one, and then returns its exit code and true; otherwise it returns false
// at once. A soak binary's main and a test binary's TestMain call it first:
// the harness re-executes its own binary to get client processes it can
// kill with SIGKILL.
func Child() (code int, isChild bool) {
	path := os.Getenv(childEnv)
	if path == "" {
		return 0, false
	}
	if err := runChildFile(context.Background(), path, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "soak client:", err)
		return 1, true
	}
	return 0, true
}

func runChildFile(ctx context.Context, path string, in io.Reader, out, logw io.Writer) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cfg childConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("client config %s: %w", path, err)
	}
	return runChild(ctx, cfg, in, out, logw)
}

// runChild is the client process: it opens a client over the configured
// queue, writes the scenario's mix until told to quiesce, reports its status
// every statusEvery and closes cleanly when told to stop or when stdin ends
// (the harness went away). The goroutine reading stdin ends with stdin, or
// at its next line once runChild has returned.
func runChild(ctx context.Context, cfg childConfig, in io.Reader, out, logw io.Writer) (err error) {
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo})).
		With("client", cfg.Profile.ID, "incarnation", cfg.Incarnation)
	j, err := journal.Create(cfg.JournalPath)
	if err != nil {
		return err
	}
	defer j.Close()
	q, err := openQueue(cfg)
	if err != nil {
		return err
	}
	skew := cfg.Profile.Skew
	now := func() time.Time { return time.Now().Add(skew) }
	w := &writer{
		cfg: cfg, j: j, now: now,
		rng: rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(cfg.Incarnation))),
	}
	c, err := client.Open(ctx, client.Config{
		ServerURLs: cfg.ServerURLs, Token: cfg.Token, ClientID: cfg.Profile.ID, Scopes: cfg.Profile.want(),
		Queue: q, ReplicaPath: cfg.ReplicaPath, ConflictHandler: w.handle,
		RetryInterval: 100 * time.Millisecond, MaxRetryInterval: time.Second,
		ProbeInterval: 500 * time.Millisecond, Backoff: reconnect.Backoff{Base: 100 * time.Millisecond, Cap: 2 * time.Second},
		Now: now, Logger: log,
	})
	if err != nil {
		q.Close()
		return err
	}
	w.c = c
	defer func() { err = errors.Join(err, c.Close()) }()
	if cfg.Profile.scoped() {
		sub, done := c.Changes(), make(chan struct{})
		go func() {
			defer close(done)
			w.journalReceived(ctx, sub)
		}()
		defer func() { sub.Close(); <-done }() // before c.Close and j.Close
	}
	log.Info("soak client started", "queue", cfg.Profile.Queue, "skew", skew)

	commands, quit := make(chan string), make(chan struct{})
	defer close(quit)
	go func() {
		defer close(commands)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case commands <- sc.Text():
			case <-quit:
				return
			}
		}
	}()
	enc := json.NewEncoder(out)
	report := func() error {
		st := w.status(ctx)
		return enc.Encode(st)
	}
	writeTimer := time.NewTimer(w.nextDelay())
	defer writeTimer.Stop()
	statusTick := time.NewTicker(statusEvery)
	defer statusTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case cmd, ok := <-commands:
			switch {
			case !ok || cmd == cmdStop:
				return report()
			case cmd == cmdQuiesce:
				w.quiescing = true
				writeTimer.Stop()
				if err := report(); err != nil {
					return err
				}
			}
		case <-writeTimer.C:
			if err := w.one(ctx); err != nil {
				return err
			}
			if !w.quiescing {
				writeTimer.Reset(w.nextDelay())
			}
		case <-statusTick.C:
			if err := report(); err != nil {
				return err
			}
		}
		if err := w.failed(); err != nil {
			return err
		}
	}
}

// openQueue opens the client's durable queue (or, for BreakVolatileQueue,
// a memory queue), wrapped to forget attempts under BreakForgetAttempts.
func openQueue(cfg childConfig) (offlinequeue.Queue, error) {
	var q offlinequeue.Queue
	switch cfg.Profile.Queue {
	case checker.QueueNDJSON:
		f, err := offlinequeue.OpenFile(cfg.QueuePath, offlinequeue.FileOptions{})
		if err != nil {
			return nil, err
		}
		q = f
	case checker.QueueSQLite:
		s, err := offlinequeue.OpenSQLite(cfg.QueuePath, offlinequeue.SQLiteOptions{})
		if err != nil {
			return nil, err
		}
		q = s
	case checker.QueueMemory:
		q = offlinequeue.NewMemory(offlinequeue.Options{})
	default:
		return nil, fmt.Errorf("unknown queue kind %q", cfg.Profile.Queue)
	}
	if cfg.ForgetAttempts {
		q = forgetfulQueue{q}
	}
	return q, nil
}

// forgetfulQueue is a deliberately broken queue: SetAttempts claims success
// and records nothing, so the retry budget never runs out.
type forgetfulQueue struct{ offlinequeue.Queue }

func (forgetfulQueue) SetAttempts(context.Context, offlinequeue.ID, offlinequeue.Attempts) error {
	return nil
}

// writer makes the scenario's writes and journals them.
type writer struct {
	cfg       childConfig
	c         *client.Client
	j         *journal.Writer
	now       func() time.Time
	rng       *rand.Rand // used by the main loop only
	n         int
	writes    int
	failures  int
	quiescing bool

	mu       sync.Mutex // guards fatal, set by the conflict handler
	fatalErr error
}

func (w *writer) nextDelay() time.Duration {
	mean := w.cfg.WriteEvery
	return mean/2 + time.Duration(w.rng.Int64N(int64(mean)+1))
}

func (w *writer) fatal(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fatalErr == nil {
		w.fatalErr = err
	}
}

func (w *writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fatalErr
}

func (w *writer) status(ctx context.Context) childStatus {
	st := childStatus{At: time.Now(), Incarnation: w.cfg.Incarnation, Writes: w.writes, Failed: w.failures, Quiescing: w.quiescing}
	s, err := w.c.Status(ctx)
	if err != nil {
		st.Err = err.Error()
		return st
	}
	st.Pending, st.DeadLetters, st.Cursor, st.Connected, st.Online = s.Pending, s.DeadLetters, s.Cursor, s.Connected, s.Online
	return st
}

// key picks a key: a third of the writes go to the hot keys.
func (w *writer) key() string {
	if w.rng.IntN(3) == 0 {
		return fmt.Sprintf("k%03d", w.rng.IntN(w.cfg.HotKeys))
	}
	return fmt.Sprintf("k%03d", w.rng.IntN(w.cfg.Keys))
}

// pad is a random filler, so values vary in size.
func (w *writer) pad() string {
	const letters = "abcdefghijklmnopqrstuvwxyz"
	b := make([]byte, w.rng.IntN(48))
	for i := range b {
		b[i] = letters[w.rng.IntN(len(letters))]
	}
	return string(b)
}

// one makes one write of the mix: LWW puts (45%), LWW deletes (10%),
// optimistic PutIfVersion at the version the replica shows (35%, clients
// that may write docs; the others put instead), and poison writes the
// server always refuses (10%: a put to audit, or a delete in docs without
// a base version). The intent is journaled before the call, its answer
// after. Only a journal failure is returned: a failed write is journaled.
func (w *writer) one(ctx context.Context) error {
	w.n++
	e := journal.Entry{Kind: journal.KindIntent, Client: w.cfg.Profile.ID,
		Write: fmt.Sprintf("%s/%d/%d", w.cfg.Profile.ID, w.cfg.Incarnation, w.n), Key: w.key(), Op: "put"}
	value := journal.Value{Write: e.Write, Pad: w.pad()}.Encode()
	docs := w.cfg.Profile.writesDocs()
	switch roll := w.rng.IntN(100); {
	case w.cfg.Profile.scoped() && w.rng.IntN(4) == 0:
		var err error
		if value, err = w.scoped(ctx, &e); err != nil {
			return err
		}
	case roll < 10:
		e.Class = journal.ClassPoison
		e.Model = ModelAudit
		if docs && roll < 5 {
			e.Model, e.Op = ModelDocs, "delete"
		}
	case roll < 20:
		e.Class, e.Model, e.Op = journal.ClassDelete, ModelNotes, "delete"
	case roll < 55 && docs:
		e.Class, e.Model = journal.ClassOptimistic, ModelDocs
		var base uint64
		rec, found, err := w.c.Get(ctx, ModelDocs, e.Key)
		if err != nil {
			return fmt.Errorf("read %s/%s: %w", ModelDocs, e.Key, err)
		}
		if found {
			base = rec.Version
		}
		e.Base = &base
	default:
		e.Class, e.Model = journal.ClassLWW, ModelNotes
	}
	if e.Op == "put" {
		e.ValueSHA = journal.ValueSHA(value)
	}
	e.At = w.now()
	if err := w.j.Append(e); err != nil {
		return err
	}
	var op string
	var err error
	switch {
	case e.Op == "delete":
		op, err = w.c.Delete(ctx, e.Model, e.Key)
	case e.Base != nil:
		op, err = w.c.PutIfVersion(ctx, e.Model, e.Key, value, *e.Base)
	default:
		op, err = w.c.Put(ctx, e.Model, e.Key, value)
	}
	e.At = w.now()
	if err != nil {
		w.failures++
		e.Kind, e.Err = journal.KindFailed, err.Error()
		return w.j.Append(e)
	}
	w.writes++
	e.Kind, e.OpID = journal.KindMade, op
	return w.j.Append(e)
}

// scoped fills e with a write of the membership churn (a quarter of a
// scoped client's writes) and returns its value: a task put in a project
// the client holds (or, one time in ten, any project: refused
// forbidden_scope unless held), a task deleted, a project granted to a
// user by a membership row, or a grant revoked by deleting one. A client
// that holds no project founds one (a membership row naming itself, which
// the server applies only while the project has no member). Deletes are
// of rows the replica holds.
func (w *writer) scoped(ctx context.Context, e *journal.Entry) (json.RawMessage, error) {
	st, err := w.c.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	var held []string
	for _, s := range st.Scopes {
		if s.Scope == ScopeProject && (s.State == client.ScopeReady || s.State == client.ScopeBackfilling) {
			held = append(held, s.Value)
		}
	}
	pick := func() string {
		if len(held) == 0 || w.rng.IntN(10) == 0 {
			return project(w.rng.IntN(Projects))
		}
		return held[w.rng.IntN(len(held))]
	}
	e.Class, e.Op = journal.ClassScoped, "put"
	v := journal.Value{Write: e.Write, Pad: w.pad()}
	present := func(model, key string) (bool, error) {
		_, found, err := w.c.Get(ctx, model, key)
		if err != nil {
			return false, fmt.Errorf("read %s/%s: %w", model, key, err)
		}
		return found, nil
	}
	me := w.cfg.Profile.User
	// Few task keys, so that puts often move a task between projects.
	task := func() string { return fmt.Sprintf("t%03d", w.rng.IntN(max(1, w.cfg.Keys/5))) }
	switch roll := w.rng.IntN(100); {
	case len(held) == 0:
		v.Project, v.User = project(w.rng.IntN(Projects)), me
		e.Model, e.Key = ModelMembers, "m-"+me+"-"+v.Project
	case roll < 50:
		v.Project = pick()
		e.Model, e.Key = ModelTasks, task()
	case roll < 60:
		e.Model, e.Key = ModelTasks, task()
		found, err := present(e.Model, e.Key)
		if err != nil {
			return nil, err
		}
		if found {
			e.Op = "delete"
			return nil, nil
		}
		v.Project = pick()
	case roll < 85 || len(w.cfg.Users) == 0:
		v.Project, v.User = pick(), me
		if len(w.cfg.Users) > 0 {
			v.User = w.cfg.Users[w.rng.IntN(len(w.cfg.Users))]
		}
		e.Model, e.Key = ModelMembers, "m-"+v.User+"-"+v.Project
	default:
		user, p := w.cfg.Users[w.rng.IntN(len(w.cfg.Users))], pick()
		e.Model, e.Key = ModelMembers, "m-"+user+"-"+p
		found, err := present(e.Model, e.Key)
		if err != nil {
			return nil, err
		}
		if found {
			e.Op = "delete"
			return nil, nil
		}
		v.Project, v.User = p, user
	}
	return v.Encode(), nil
}

// scopedModels are the models ScopeProject covers: what reaches a scoped
// client of them is journaled.
var scopedModels = map[string]bool{ModelTasks: true, ModelMembers: true}

// journalReceived journals what reaches the client from the server in
// scopedModels (journal.KindReceived), every resync with the rows its
// snapshot left (journal.KindSnapshot), and every lag of the
// subscription, until sub's channel closes. A subscription opened after
// client.Open may miss the first changes of the first connection; the
// checker judges what is journaled.
func (w *writer) journalReceived(ctx context.Context, sub *client.Subscription) {
	for ev := range sub.C {
		e := journal.Entry{At: w.now(), Client: w.cfg.Profile.ID, Seq: ev.At}
		switch {
		case ev.Lagged:
			e.Kind = journal.KindLagged
		case ev.Resync:
			e.Kind = journal.KindResync
			if err := w.j.Append(e); err != nil {
				w.fatal(err)
			}
			if err := w.journalSnapshot(ctx, ev.At); err != nil && !errors.Is(err, client.ErrClosed) {
				w.fatal(err)
			}
			continue
		case ev.Local || !scopedModels[ev.Model]:
			continue
		default:
			e.Kind, e.Model, e.Key, e.Version, e.ScopeValue, e.Reason = journal.KindReceived, ev.Model, ev.Key, ev.Version, ev.ScopeValue, ev.Evicted
			switch {
			case ev.Evicted != "":
				e.Op = "evict"
			case ev.Deleted:
				e.Op = "delete"
			default:
				e.Op, e.ValueSHA = "put", journal.ValueSHA(ev.Value)
			}
		}
		if err := w.j.Append(e); err != nil {
			w.fatal(err)
		}
	}
}

// journalSnapshot journals the rows of scopedModels the replica holds
// after loading a snapshot read at head (journal.KindSnapshot), but those
// with a pending write over them.
func (w *writer) journalSnapshot(ctx context.Context, head uint64) error {
	for model := range scopedModels {
		var start string
		for {
			recs, err := w.c.List(ctx, model, client.ListOptions{Start: start})
			if err != nil {
				return fmt.Errorf("list %s after a resync: %w", model, err)
			}
			for _, r := range recs {
				if r.Pending {
					continue
				}
				v, _ := journal.ParseValue(r.Value)
				e := journal.Entry{Kind: journal.KindSnapshot, At: w.now(), Client: w.cfg.Profile.ID, Seq: head,
					Model: model, Key: r.Key, Op: "put", Version: r.Version, ScopeValue: v.Project, ValueSHA: journal.ValueSHA(r.Value)}
				if err := w.j.Append(e); err != nil {
					return err
				}
			}
			if len(recs) < client.DefaultListLimit {
				return nil
			}
			start = recs[len(recs)-1].Key + "\x00"
		}
	}
	return nil
}

// handle is the app's conflict handler. Its decision depends on the op id
// alone (and the rebase depth the value carries), so asking twice about the
// same conflict (a crash between the answer and its record) answers the
// same: three in four conflicts are rebased over the winner, the rest
// dropped, and a write already rebased maxRebaseDepth times is dropped.
// The decision is journaled before it is returned.
func (w *writer) handle(_ context.Context, c client.Conflict) client.Resolution {
	depth := 0
	if v, ok := journal.ParseValue(c.Value); ok {
		depth = v.Depth
	}
	sum := sha256.Sum256([]byte(c.OpID))
	e := journal.Entry{Kind: journal.KindHandler, At: w.now(), Client: w.cfg.Profile.ID, OpID: c.OpID, Model: c.Model, Key: c.Key, Decision: journal.DecisionDrop}
	res := client.Drop()
	if depth < maxRebaseDepth && binary.BigEndian.Uint32(sum[:4])%4 != 0 {
		base := c.Winner.Version
		v := journal.Value{Write: w.cfg.Profile.ID + "/rebase/" + c.OpID, Depth: depth + 1}.Encode()
		e.Decision, e.Class, e.Op, e.Write, e.Base, e.ValueSHA = journal.DecisionRebase, journal.ClassRebase, "put", w.cfg.Profile.ID+"/rebase/"+c.OpID, &base, journal.ValueSHA(v)
		res = client.Rebase(v)
	}
	if err := w.j.Append(e); err != nil {
		w.fatal(err)
	}
	return res
}
