// Package adminapi is the contract of syncd's admin API: its paths, query
// parameters, limits and the JSON answers syncd sends. The server fills
// these types; syncctl, the test kit and any console read them, so none of
// them needs to link the server (or, through it, NATS).
//
// The API is JSON over HTTP on syncd's admin listener (loopback by
// default); every path but /healthz needs an admin token
// (Authorization: Bearer ...). A request that fails is answered with a
// non-2xx status and an Error body: 400 for a malformed parameter, 401
// without an admin token, 404 for a ledger op that is not held (its body
// is still a LedgerAnswer), 409 for an oplog cursor past the head or
// before the retained oplog, 500 for a failure of the server.
//
// The field names and encodings are part of the contract: a field may be
// added, none is renamed or retyped (the server's golden tests pin them).
// The package imports only syncproto, whose Change an OplogEntry embeds.
package adminapi

import (
	"encoding/json"
	"net/url"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// The admin API's paths.
const (
	// PathStatus answers a Status.
	PathStatus = "/v1/admin/status"
	// PathSessions answers the connected sessions, a []Session.
	PathSessions = "/v1/admin/clients"
	// PathOplog answers an OplogPage; parameters ParamFrom, ParamLimit,
	// ParamTenant, ParamModel.
	PathOplog = "/v1/admin/oplog"
	// PathConflicts answers a []Conflict, newest first; parameters
	// ParamBefore, ParamLimit, ParamTenant, ParamModel.
	PathConflicts = "/v1/admin/conflicts"
	// PathLedgerPrefix followed by an op id (LedgerPath) answers a
	// LedgerAnswer; parameter ParamTenant is required.
	PathLedgerPrefix = "/v1/admin/ledger/"
	// PathHealth answers 200 while the process serves; it needs no token.
	PathHealth = "/healthz"
	// PathProfiles is the prefix of Go's profiles (net/http/pprof).
	PathProfiles = "/debug/pprof/"
)

// The admin API's query parameters.
const (
	// ParamFrom is the oplog sequence after which a page starts (0: the
	// oldest retained entry).
	ParamFrom = "from"
	// ParamLimit bounds the entries or rows of one answer (0 or absent:
	// the maximum, MaxOplogPage or MaxConflicts).
	ParamLimit = "limit"
	// ParamTenant selects one tenant (absent: every tenant, except for the
	// ledger, where it is required).
	ParamTenant = "tenant"
	// ParamModel selects one model (absent: every model).
	ParamModel = "model"
	// ParamBefore lists conflict rows with an id below it (0: the newest).
	ParamBefore = "before"
)

// The admin API's limits: a larger limit is served as the maximum.
const (
	// MaxOplogPage bounds the entries of one OplogPage.
	MaxOplogPage = syncproto.MaxPullLimit
	// MaxConflicts bounds the rows of one conflicts answer.
	MaxConflicts = 1000
)

// LedgerPath is the path of the ledger answer for opID.
func LedgerPath(opID string) string { return PathLedgerPrefix + url.PathEscape(opID) }

// Error is the body of every error answer.
type Error struct {
	Error string `json:"error"`
}

// Status is the answer of PathStatus: one node as it sees itself.
type Status struct {
	NodeID string `json:"node_id"`
	// Build is the answering syncd's build (syncd --version) and
	// DatabaseID the database it serves (welcome.database_id).
	Build         string    `json:"build"`
	DatabaseID    string    `json:"database_id"`
	StartedAt     time.Time `json:"started_at"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	// Connections counts the open sync sessions.
	Connections int `json:"connections"`
	// Draining is true once the node stopped accepting sessions to shut
	// down.
	Draining bool `json:"draining"`
	// OplogHead is the newest sequence; OplogOldest the oldest retained.
	OplogHead   uint64 `json:"oplog_head"`
	OplogOldest uint64 `json:"oplog_oldest"`
	// OplogFloor is the highest of the tenants' oplog floors: a reader of
	// every tenant (the admin oplog) may start at it or after; a device
	// is checked against its own tenant's floor, which is at most this.
	OplogFloor    uint64 `json:"oplog_floor"`
	LedgerEntries int    `json:"ledger_entries"`
	// LedgerFloor is the highest of the tenants' ledger floors: no resend
	// stamped after it is answered "expired", whatever its tenant. Zero
	// while retention never evicted a decision.
	LedgerFloor time.Time `json:"ledger_floor,omitzero"`
	// MaxClientLagEntries is the largest head-minus-cursor among live
	// subscribers: how far the slowest connected client is behind.
	MaxClientLagEntries uint64 `json:"max_client_lag_entries"`
	// Cluster is set on a cluster node: every node as it last reported.
	Cluster *ClusterStatus `json:"cluster,omitempty"`
}

// ClusterStatus is the cluster as one node sees it.
type ClusterStatus struct {
	ID string `json:"id"`
	// LeaseHolder is the node holding the singleton-job lease, as the nodes
	// report it ("" when none reports it).
	LeaseHolder string `json:"lease_holder"`
	// Nodes are sorted by name; the answering node's entry is current, the
	// others' are what each last reported.
	Nodes []Node `json:"nodes"`
}

// Node is one cluster node's report of its materializer.
type Node struct {
	Node string `json:"node"`
	// AppliedSeq is the last command stream sequence the node applied.
	AppliedSeq uint64 `json:"applied_seq"`
	// Digest is the node's running state digest (hex) after AppliedSeq:
	// two nodes at the same AppliedSeq with different digests diverged.
	Digest string `json:"digest"`
	// StreamHead is the newest command stream sequence the node knew of;
	// Lag is StreamHead minus AppliedSeq.
	StreamHead uint64 `json:"stream_head"`
	Lag        uint64 `json:"lag"`
	// LeaseHeld is true on the holder of the singleton-job lease.
	LeaseHeld bool `json:"lease_held"`
	// Ready is false, with Problem saying why, while the node does not
	// serve.
	Ready   bool   `json:"ready"`
	Problem string `json:"problem,omitempty"`
	// At is when the node made this report.
	At time.Time `json:"at"`
	// Agreement holds a hash per part of the configuration every node
	// must share (token file, models, retention...): a node whose part
	// differs from the majority's does not serve.
	Agreement map[string]string `json:"agreement,omitempty"`
	// Format is the highest command stream format the node understands
	// and announces (0 from a release before formats); ClusterVersion the
	// cluster version as the node last surveyed it: the lowest format its
	// members announce, the newest any node publishes
	// (docs/operations.md, Upgrades).
	Format         int `json:"format,omitempty"`
	ClusterVersion int `json:"cluster_version,omitempty"`
}

// Session is one connected sync session in the answer of PathSessions.
type Session struct {
	ClientID    string    `json:"client_id"`
	Tenant      string    `json:"tenant"`
	TokenID     string    `json:"token_id"`
	Remote      string    `json:"remote"`
	ConnectedAt time.Time `json:"connected_at"`
	// Cursor is the last sequence the session's feed delivered.
	Cursor uint64 `json:"cursor"`
	// PendingPushes counts the session's pushes not yet answered.
	PendingPushes int64 `json:"pending_pushes"`
}

// OplogPage is the answer of PathOplog.
type OplogPage struct {
	Entries []OplogEntry `json:"entries"`
	// Next is the ParamFrom of the following page.
	Next uint64 `json:"next"`
	Head uint64 `json:"head"`
}

// OplogEntry is one oplog entry: the change as the feed sends it, plus
// who wrote it and when it was applied.
type OplogEntry struct {
	syncproto.Change
	Tenant    string    `json:"tenant"`
	ClientID  string    `json:"client_id"`
	AppliedAt time.Time `json:"applied_at"`
}

// Conflict is one conflict-log row in the answer of PathConflicts.
type Conflict struct {
	ID     int64            `json:"id"`
	Tenant string           `json:"tenant"`
	Model  string           `json:"model"`
	Key    string           `json:"key"`
	Policy syncproto.Policy `json:"policy"`
	Reason string           `json:"reason"`
	// Loser is the write that was not applied as sent; Winner the state
	// that stands (version 0: the key did not exist).
	Loser     ConflictSide `json:"loser"`
	Winner    ConflictSide `json:"winner"`
	DecidedAt time.Time    `json:"decided_at"`
}

// ConflictSide is one party to a conflict.
type ConflictSide struct {
	OpID    string              `json:"op_id,omitempty"`
	Version uint64              `json:"version"`
	Value   json.RawMessage     `json:"value,omitempty"`
	HLC     syncproto.Timestamp `json:"hlc,omitzero"`
	Deleted bool                `json:"deleted"`
}

// LedgerAnswer is the answer of LedgerPath: what the ledger decided for an
// op of a tenant, and when.
type LedgerAnswer struct {
	Tenant string `json:"tenant"`
	OpID   string `json:"op_id"`
	// Found is false (and the status 404) when the ledger does not hold
	// the op: never decided, or evicted by retention (see Floor).
	Found     bool              `json:"found"`
	OpTime    time.Time         `json:"op_time,omitzero"`
	DecidedAt time.Time         `json:"decided_at,omitzero"`
	Result    *syncproto.Result `json:"result,omitempty"`
	// Floor is the tenant's ledger floor: an op of the tenant that is not
	// held and is at or before it would be answered "expired" if resent.
	Floor time.Time `json:"floor,omitzero"`
}
