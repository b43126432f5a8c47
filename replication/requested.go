package replication

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/syncproto"
)

// Requested sets (PROTOCOL.md 19.3): the server keeps, per device (tenant
// and client id), the scope values its last subscription with scopes
// requested, so that an operator can ask what a device follows while it
// is offline, and so that every cluster node holds the same sets. A set is
// recorded by a Batch carrying Requested, decided and replicated like any
// other batch (a cluster's command stream carries it), so every node
// derives the same sets from the same log. The edge sends one only when
// the set changed: a reconnect with the same request costs no commit.

// MaxRequestedDevices bounds the requested sets kept per tenant. Recording
// the set of a device new to a tenant that already keeps this many drops
// the sets recorded longest ago (RequestedSet.At, then client id): every
// node drops the same ones. A device whose set was dropped has it recorded
// again at its next subscribe.
const MaxRequestedDevices = 10000

// Requested is the requested set a Batch records for its tenant and client
// id, as the edge read it from a subscribe.
type Requested struct {
	// User is the device's user from its token ("" when it names none).
	User string `json:"user,omitempty"`
	// Scopes is the request, normalized (syncproto.ScopeSet.Normalize):
	// scope names to values, or to [AllValues]. An empty set requests no
	// scoped row.
	Scopes syncproto.ScopeSet `json:"scopes,omitempty"`
	// Clear, when true, removes the device's set instead (it subscribed
	// without scopes: it follows every grant).
	Clear bool `json:"clear,omitempty"`
}

// RequestedSet is one device's recorded requested set.
type RequestedSet struct {
	Tenant   string
	ClientID string
	User     string
	Scopes   syncproto.ScopeSet
	// At is the time of the batch that recorded it: when the set last
	// changed, to the millisecond.
	At time.Time
	// Clear is set on an Effects.Requested that removes the set.
	Clear bool
}

// check validates r (nil is valid): its user, and its scope names and
// values as a request's (syncproto.ScopeSet.Validate).
func (r *Requested) check() error {
	if r == nil {
		return nil
	}
	if r.User != "" {
		if err := syncproto.ValidateUser(r.User); err != nil {
			return fmt.Errorf("requested: user: %v", err)
		}
	}
	return r.Scopes.Validate("requested", 0)
}

// requestedOf returns what b's Requested records, nil when it carries none.
func requestedOf(b *Batch) *RequestedSet {
	if b.Requested == nil {
		return nil
	}
	r := &RequestedSet{Tenant: b.Tenant, ClientID: b.ClientID, User: b.Requested.User, At: b.At, Clear: b.Requested.Clear}
	if !r.Clear {
		r.Scopes = cloneScopeSet(b.Requested.Scopes)
		r.Scopes.Normalize()
	}
	return r
}

func cloneScopeSet(s syncproto.ScopeSet) syncproto.ScopeSet {
	out := make(syncproto.ScopeSet, len(s))
	for n, v := range s {
		out[n] = slices.Clone(v)
	}
	return out
}

// SameRequest reports whether a and b request the same values (both
// normalized): a scope present with no value requests nothing, as does an
// absent one.
func SameRequest(a, b syncproto.ScopeSet) bool {
	nonEmpty := func(s syncproto.ScopeSet) map[string][]string {
		out := map[string][]string{}
		for n, v := range s {
			if len(v) > 0 {
				out[n] = v
			}
		}
		return out
	}
	return maps.EqualFunc(nonEmpty(a), nonEmpty(b), slices.Equal)
}

// saveRequested records r in tx: nothing when the device's set is already
// r's (same user, same values), else its values replace the old ones; a
// device new to its tenant beyond MaxRequestedDevices drops the oldest
// sets first.
func saveRequested(ctx context.Context, tx *sql.Tx, r *RequestedSet) error {
	old, found, err := getRequested(ctx, tx, r.Tenant, r.ClientID)
	if err != nil {
		return err
	}
	switch {
	case r.Clear && !found:
		return nil
	case r.Clear:
		return dropRequested(ctx, tx, old)
	case found && old.User == r.User && SameRequest(old.Scopes, r.Scopes):
		return nil
	case found:
		if err := dropRequested(ctx, tx, old); err != nil {
			return err
		}
	default:
		if err := boundRequested(ctx, tx, r.Tenant); err != nil {
			return err
		}
	}
	scopes, err := json.Marshal(r.Scopes)
	if err != nil {
		return fmt.Errorf("record requested set of %s: %w", r.ClientID, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO requested_sets (tenant, client_id, user_id, scopes, set_at) VALUES (?, ?, ?, ?, ?)`,
		r.Tenant, r.ClientID, r.User, string(scopes), r.At.UnixMilli()); err != nil {
		return fmt.Errorf("record requested set of %s: %w", r.ClientID, err)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Scopes)) {
		for _, v := range r.Scopes[name] {
			if _, err := tx.ExecContext(ctx, `INSERT INTO requested_values (tenant, scope, value, client_id) VALUES (?, ?, ?, ?)`,
				r.Tenant, name, v, r.ClientID); err != nil {
				return fmt.Errorf("record requested set of %s: %w", r.ClientID, err)
			}
		}
	}
	return nil
}

// boundRequested drops tenant's oldest sets until one more fits within
// MaxRequestedDevices.
func boundRequested(ctx context.Context, tx *sql.Tx, tenant string) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM requested_sets WHERE tenant = ?`, tenant).Scan(&n); err != nil {
		return fmt.Errorf("count requested sets of %s: %w", tenant, err)
	}
	if n < MaxRequestedDevices {
		return nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT client_id FROM requested_sets WHERE tenant = ? ORDER BY set_at, client_id LIMIT ?`, tenant, n-MaxRequestedDevices+1)
	if err != nil {
		return fmt.Errorf("oldest requested sets of %s: %w", tenant, err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, id := range ids {
		old, _, err := getRequested(ctx, tx, tenant, id)
		if err != nil {
			return err
		}
		if err := dropRequested(ctx, tx, old); err != nil {
			return err
		}
	}
	return nil
}

// dropRequested removes the set old and its values.
func dropRequested(ctx context.Context, tx *sql.Tx, old RequestedSet) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM requested_sets WHERE tenant = ? AND client_id = ?`, old.Tenant, old.ClientID); err != nil {
		return fmt.Errorf("drop requested set of %s: %w", old.ClientID, err)
	}
	for name, values := range old.Scopes {
		for _, v := range values {
			if _, err := tx.ExecContext(ctx, `DELETE FROM requested_values WHERE tenant = ? AND scope = ? AND value = ? AND client_id = ?`,
				old.Tenant, name, v, old.ClientID); err != nil {
				return fmt.Errorf("drop requested set of %s: %w", old.ClientID, err)
			}
		}
	}
	return nil
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getRequested(ctx context.Context, q queryRower, tenant, clientID string) (RequestedSet, bool, error) {
	r := RequestedSet{Tenant: tenant, ClientID: clientID}
	var scopes string
	var at int64
	err := q.QueryRowContext(ctx, `SELECT user_id, scopes, set_at FROM requested_sets WHERE tenant = ? AND client_id = ?`, tenant, clientID).
		Scan(&r.User, &scopes, &at)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return RequestedSet{}, false, nil
	case err != nil:
		return RequestedSet{}, false, fmt.Errorf("read requested set of %s: %w", clientID, err)
	}
	if err := json.Unmarshal([]byte(scopes), &r.Scopes); err != nil {
		return RequestedSet{}, false, fmt.Errorf("read requested set of %s: %w", clientID, err)
	}
	if r.Scopes == nil {
		r.Scopes = syncproto.ScopeSet{}
	}
	r.At = time.UnixMilli(at).UTC()
	return r, true, nil
}

// RequestedSet returns the requested set recorded for clientID in tenant,
// and whether one is.
func (s *Store) RequestedSet(ctx context.Context, tenant, clientID string) (RequestedSet, bool, error) {
	return getRequested(ctx, s.DB, tenant, clientID)
}

// RequestedCounts counts, for each of values of scope in tenant, the
// recorded sets that request it: by name or by AllValues.
func (s *Store) RequestedCounts(ctx context.Context, tenant, scope string, values []string) (map[string]int, error) {
	out := make(map[string]int, len(values))
	if len(values) == 0 {
		return out, nil
	}
	var all int
	if err := s.DB.QueryRowContext(ctx, `SELECT count(*) FROM requested_values WHERE tenant = ? AND scope = ? AND value = ?`,
		tenant, scope, syncproto.AllValues).Scan(&all); err != nil {
		return nil, fmt.Errorf("count requested sets of %s: %w", scope, err)
	}
	args := []any{tenant, scope}
	for _, v := range values {
		args = append(args, v)
		out[v] = all
	}
	rows, err := s.DB.QueryContext(ctx, `SELECT value, count(*) FROM requested_values WHERE tenant = ? AND scope = ?
		AND value IN (?`+strings.Repeat(",?", len(values)-1)+`) GROUP BY value`, args...)
	if err != nil {
		return nil, fmt.Errorf("count requested sets of %s: %w", scope, err)
	}
	defer rows.Close()
	for rows.Next() {
		var v string
		var n int
		if err := rows.Scan(&v, &n); err != nil {
			return nil, err
		}
		out[v] += n
	}
	return out, rows.Err()
}

// addRequestedSets is the schema step that adds the requested sets:
// requested_sets holds each device's set (its JSON), requested_values one
// row per value of it, keyed by value for the counts. It shipped as it is:
// a change is a new step of migrations.
var addRequestedSets = sqlitedb.Statements(
	`CREATE TABLE IF NOT EXISTS requested_sets (
		tenant    TEXT    NOT NULL,
		client_id TEXT    NOT NULL,
		user_id   TEXT    NOT NULL,
		scopes    TEXT    NOT NULL,
		set_at    INTEGER NOT NULL,
		PRIMARY KEY (tenant, client_id)
	) WITHOUT ROWID`,
	`CREATE INDEX IF NOT EXISTS requested_sets_age ON requested_sets (tenant, set_at, client_id)`,
	`CREATE TABLE IF NOT EXISTS requested_values (
		tenant    TEXT NOT NULL,
		scope     TEXT NOT NULL,
		value     TEXT NOT NULL,
		client_id TEXT NOT NULL,
		PRIMARY KEY (tenant, scope, value, client_id)
	) WITHOUT ROWID`)
