package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"

	"github.com/syncd-dev/syncd/syncproto"
)

// Errors of a snapshot download the client abandoned. Either way the
// replica and the queue are left as they were; the link is closed and
// the client reconnects and fetches the snapshot again after the growing
// wait of a quick link loss however long the download took (link.healthy,
// relinkDelay), so a hostile or broken server costs one bounded download
// per wait, never the device's memory or its writes.
var (
	// ErrSnapshotTooLarge: a snapshot exceeded Config.MaxSnapshotBytes.
	ErrSnapshotTooLarge = errors.New("client: snapshot larger than MaxSnapshotBytes")
	// ErrSnapshotTimeout: a snapshot took longer than
	// Config.SnapshotTimeout. It is returned joined with
	// context.DeadlineExceeded.
	ErrSnapshotTimeout = errors.New("client: snapshot took longer than SnapshotTimeout")
	// ErrSnapshotScopes: a scoped snapshot's header (its scopes, the
	// values it holds complete, PROTOCOL.md 19.6) disagrees with the
	// request or with its own rows. Nothing of it is kept: a replica
	// partial without knowing it would miss rows for good. Errors wrapping
	// it are *SnapshotScopesError.
	ErrSnapshotScopes = errors.New("client: snapshot does not hold the scope values asked for")
)

// SnapshotScopesError says how a scoped snapshot disagreed with what the
// device asked for: the scope and value (Value "" when the whole header
// is at fault) and the problem. errors.Is(err, ErrSnapshotScopes) holds.
type SnapshotScopesError struct {
	Scope, Value string
	Problem      string
}

func (e *SnapshotScopesError) Error() string {
	if e.Scope == "" {
		return fmt.Sprintf("%v: %s", ErrSnapshotScopes, e.Problem)
	}
	return fmt.Sprintf("%v: scope %q value %q: %s", ErrSnapshotScopes, e.Scope, e.Value, e.Problem)
}

// Is reports whether target is ErrSnapshotScopes.
func (e *SnapshotScopesError) Is(target error) bool { return target == ErrSnapshotScopes }

// Reasons a snapshot download was abandoned
// (syncd_client_snapshots_abandoned_total's reason label).
const (
	abandonedTooLarge = "too_large" // beyond MaxSnapshotBytes
	abandonedTimeout  = "timeout"   // beyond SnapshotTimeout
	abandonedStatus   = "status"    // the server answered other than 200
	abandonedTruncate = "truncated" // the body ended without its trailer
	abandonedInvalid  = "invalid"   // a line that does not decode or validate
	abandonedFailed   = "failed"    // the transport or the replica failed
	abandonedScopes   = "scopes"    // the header's scopes disagree with the request (ErrSnapshotScopes)
)

// boundedReader reads at most left bytes of r, then fails with
// ErrSnapshotTooLarge and remembers it (exceeded): a line reader above it
// may report the cut as a malformed last line instead.
type boundedReader struct {
	r        io.Reader
	left     int64
	exceeded bool
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.exceeded = true
		return 0, ErrSnapshotTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// loadSnapshot replaces the replica's records with the server's snapshot.
// The body is streamed into the replica in pages bounded in records and
// bytes (replica.resetFromSnapshot), so memory stays flat whatever its
// size; MaxSnapshotBytes and SnapshotTimeout end one that does not. A
// download that fails is counted by reason unless ctx ended it (the link
// was stopped).
//
// With scopes (PROTOCOL.md 19.6) it asks for the values sc.want names
// (scoped=1), and keeps, in the same commit, only the rows of covered
// models whose value the request holds: have are the values the
// snapshot's header says it holds complete. A header that disagrees with
// the request or the rows (ErrSnapshotScopes) keeps nothing, and the
// client fetches the snapshot again as after any abandoned download.
func (c *Client) loadSnapshot(ctx context.Context, baseURL string, sc snapshotScopes) (head uint64, have syncproto.ScopeSet, err error) {
	head, have, reason, err := c.fetchSnapshot(ctx, baseURL, sc)
	if err == nil {
		c.metrics.resyncs.Inc()
		c.changes.publish(ChangeEvent{Resync: true, At: head})
		return head, have, nil
	}
	if ctx.Err() == nil {
		c.metrics.snapshotsAbandoned.WithLabelValues(reason).Inc()
	}
	return 0, nil, fmt.Errorf("snapshot: %w", err)
}

// snapshotScopes is what a snapshot of a device with scopes keeps: the
// request, the models each declared scope covers, and the values the
// snapshot's header says it holds complete.
type snapshotScopes struct {
	want syncproto.ScopeSet
	lost map[string]map[string]string // kept as they are
	cov  covered
	held syncproto.ScopeSet // the header's scopes (nil: none)
}

// checkHeader checks a scoped snapshot's header against the request,
// before any row is read: it must name the values it holds (a scoped
// snapshot always does, an empty set included), and only values the
// request asked for. A requested value it does not name is not an error
// here: the server leaves out values not granted, and the subscription
// answers them not_granted.
func (sc snapshotScopes) checkHeader() error {
	if len(sc.want) == 0 {
		return nil
	}
	if sc.held == nil {
		return &SnapshotScopesError{Problem: "a snapshot asked for scope values whose header names none (it must list the values it holds, PROTOCOL.md 19.6)"}
	}
	for _, name := range slices.Sorted(maps.Keys(sc.held)) {
		for _, v := range sc.held[name] {
			if !sc.want.Has(name, v) {
				return &SnapshotScopesError{Scope: name, Value: v, Problem: "the snapshot holds a value the device did not ask for"}
			}
		}
	}
	return nil
}

// complete returns the values the loaded snapshot holds complete, given
// rows, the requested values its rows carry (keepFollowed): the values
// its header names, plus, of a scope requested "*" that the header does
// not name (the server follows every value of it, 19.3), the values of its
// rows. A row of a requested value the header does not claim complete is
// an error: the snapshot would leave the value partial.
func (sc snapshotScopes) complete(rows syncproto.ScopeSet) (syncproto.ScopeSet, error) {
	if len(sc.want) == 0 {
		return rows, nil
	}
	have := syncproto.ScopeSet{}
	for name, values := range sc.held {
		have[name] = slices.Clone(values)
	}
	for _, name := range slices.Sorted(maps.Keys(rows)) {
		_, named := sc.held[name]
		if sc.want.All(name) && !named {
			have[name] = slices.Clone(rows[name])
			continue
		}
		for _, v := range rows[name] {
			if !sc.held.Has(name, v) {
				return nil, &SnapshotScopesError{Scope: name, Value: v, Problem: "the snapshot has rows of the value but does not say it holds it complete"}
			}
		}
	}
	have.Normalize()
	return have, nil
}

// query is the snapshot URL's scope parameters (19.6): none without a
// request, else scoped=1 and one scope=NAME:VALUE per value requested.
func (sc snapshotScopes) query() string {
	if len(sc.want) == 0 {
		return ""
	}
	q := url.Values{"scoped": {"1"}}
	for _, name := range slices.Sorted(maps.Keys(sc.want)) {
		for _, v := range sc.want[name] {
			q.Add("scope", name+":"+v)
		}
	}
	return "?" + q.Encode()
}

// fetchSnapshot is loadSnapshot's download and load; a failure comes with
// its reason.
func (c *Client) fetchSnapshot(parent context.Context, baseURL string, sc snapshotScopes) (uint64, syncproto.ScopeSet, string, error) {
	ctx, cancel := context.WithTimeout(parent, c.cfg.SnapshotTimeout)
	defer cancel()
	body := &boundedReader{left: c.cfg.MaxSnapshotBytes}
	fail := func(err error) (uint64, syncproto.ScopeSet, string, error) {
		switch {
		case body.exceeded:
			return 0, nil, abandonedTooLarge, fmt.Errorf("%w (%d bytes)", ErrSnapshotTooLarge, c.cfg.MaxSnapshotBytes)
		case parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
			return 0, nil, abandonedTimeout, fmt.Errorf("%w (%s): %w", ErrSnapshotTimeout, c.cfg.SnapshotTimeout, context.DeadlineExceeded)
		case errors.Is(err, syncproto.ErrSnapshotTruncated):
			return 0, nil, abandonedTruncate, err
		}
		if errors.Is(err, ErrSnapshotScopes) {
			return 0, nil, abandonedScopes, err
		}
		var pe *syncproto.Error
		if errors.As(err, &pe) {
			return 0, nil, abandonedInvalid, err
		}
		return 0, nil, abandonedFailed, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, httpURL(baseURL, syncproto.SnapshotPath)+sc.query(), nil)
	if err != nil {
		return fail(err)
	}
	token, err := c.tokens.get(ctx)
	if err != nil {
		return fail(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return 0, nil, abandonedStatus, fmt.Errorf("server answered %s", resp.Status)
	}
	body.r = resp.Body
	sr, err := syncproto.NewSnapshotReader(body)
	if err != nil {
		return fail(err)
	}
	sc.held = sr.Scopes()
	if err := sc.checkHeader(); err != nil {
		return fail(err)
	}
	head, have, err := c.replica.resetFromSnapshot(ctx, sr, sc)
	if err != nil {
		return fail(err)
	}
	return head, have, "", nil
}
