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
// is still a LedgerAnswer) or a deny-list entry that is not there, 409 for
// an oplog cursor past the head or before the retained oplog, or a deny
// list asked of a syncd without one, 500 for a failure of the server.
// Admin tokens start "sda_" (older ones "sdk_", like client tokens).
//
// The field names and encodings are part of the contract: a field may be
// added, none is renamed or retyped (the server's golden tests pin them).
// The package imports only syncproto, whose Change an OplogEntry embeds.
package adminapi

import (
	"encoding/json"
	"net/url"
	"strings"
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
	// PathFigures answers a Figures: the server's running totals, which a
	// reader samples for rates (the console's live overview does).
	PathFigures = "/v1/admin/figures"
	// PathDisconnect (POST) ends the sessions of one device, the way a
	// drain does (pending pushes are answered, then the session closes
	// 1001 and the device reconnects): parameters ParamTenant and
	// ParamClientID, both required. It answers a Disconnected, with 404
	// when the device has no session here.
	PathDisconnect = "/v1/admin/clients/disconnect"
	// PathTenants answers a TenantsPage: the tenants this node knows of
	// (with sessions here, with oplog entries, or served by its committer
	// since it started), sorted by name; parameters ParamAfter (names
	// after it) and ParamLimit (at most MaxTenants, the default).
	PathTenants = "/v1/admin/tenants"
	// PathHealth answers 200 while the process serves; it needs no token.
	PathHealth = "/healthz"
	// PathProfiles is the prefix of Go's profiles (net/http/pprof).
	PathProfiles = "/debug/pprof/"
	// PathDeny is the JWT deny list: GET answers a DenyList; POST with a
	// Denial body adds an entry and DELETE with ParamJTI or ParamUser
	// removes one, each answering a DenyChange. 409 when syncd has no
	// deny list file (--jwt-deny-file), 404 for a DELETE of an entry the
	// list does not hold.
	PathDeny = "/v1/admin/deny"
	// PathTokens is the token file's tokens. GET answers a TokensPage
	// (sorted by id; parameters ParamAfter and ParamLimit, at most
	// MaxTokensPage; with ParamTokenID, that token alone, or none). POST with a TokenRequest body issues a token and
	// answers an IssuedToken: its bearer token is in that answer only (the
	// file keeps a hash), 400 when the request names an invalid principal.
	// DELETE with ParamTokenID revokes a token, ends its open sessions
	// (unauthorized, close 1008) before answering, and answers a
	// TokenRevoked; 404 when the file holds no such token. 409 when syncd
	// runs without a token file (JWT only).
	PathTokens = "/v1/admin/tokens"
	// PathRecentDevices answers a []RecentDevice: the devices whose last
	// session on this node ended lately, latest first, at most
	// MaxRecentDevices.
	PathRecentDevices = "/v1/admin/clients/recent"
	// PathCluster answers a ClusterInfra: the NATS servers a cluster node
	// knows and the command stream's leader and replicas (one JetStream
	// request); 409 on a single node.
	PathCluster = "/v1/admin/cluster"
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
	// ParamJTI and ParamUser name the deny-list entry a DELETE of PathDeny
	// removes (exactly one).
	ParamJTI  = "jti"
	ParamUser = "user"
	// ParamClientID names one device (PathDisconnect).
	ParamClientID = "client_id"
	// ParamAfter lists the tokens with an id, the tenants with a name, or
	// the scope values after it (PathTokens, PathTenants, and the
	// ScopesPage.Next of the previous page of PathScopes; "" or absent:
	// from the first).
	ParamAfter = "after"
	// ParamTokenID names the token a DELETE of PathTokens revokes, or
	// the one a GET lists.
	ParamTokenID = "token_id"
)

// The admin API's limits: a larger limit is served as the maximum.
const (
	// MaxOplogPage bounds the entries of one OplogPage.
	MaxOplogPage = syncproto.MaxPullLimit
	// MaxConflicts bounds the rows of one conflicts answer.
	MaxConflicts = 1000
	// MaxTenants bounds the tenants of one TenantsPage.
	MaxTenants = 10000
	// MaxTokensPage bounds the tokens of one TokensPage.
	MaxTokensPage = 1000
	// MaxTokenRequestBytes bounds the body of a POST of PathTokens.
	MaxTokenRequestBytes = 16 << 10
	// MaxRecentDevices bounds the disconnected devices whose last push
	// and last error a node keeps (PathRecentDevices).
	MaxRecentDevices = 256
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
	Build      string `json:"build"`
	DatabaseID string `json:"database_id"`
	// SchemaVersion is the database's schema version (its PRAGMA
	// user_version, syncd_database_info's schema_version).
	SchemaVersion int       `json:"schema_version"`
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
	// LeaseToken is the holder's fencing token (0 when none reports it).
	LeaseToken uint64 `json:"lease_token,omitempty"`
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
	// LeaseToken is the singleton-job lease's fencing token (its
	// revision) on the node holding it, 0 on the others.
	LeaseToken uint64 `json:"lease_token,omitempty"`
	// LastDigestCheck and LastRecordsCheck are the node's last
	// comparisons of its state digest with its peers' at one stream seq
	// (nil before the first); a records check's digest covers record
	// contents.
	LastDigestCheck  *Check `json:"last_digest_check,omitempty"`
	LastRecordsCheck *Check `json:"last_records_check,omitempty"`
}

// Check is one comparison of a node's state digest with its peers' at
// stream seq Seq.
type Check struct {
	At  time.Time `json:"at"`
	Seq uint64    `json:"seq"`
	// Result is "match" when every peer that reported at Seq agreed,
	// "mismatch" when one disagreed (Disagree names them).
	Result   string   `json:"result"`
	Agree    []string `json:"agree,omitempty"`
	Disagree []string `json:"disagree,omitempty"`
}

// ClusterInfra is the answer of PathCluster: the messaging a cluster
// node runs on, as it sees it now.
type ClusterInfra struct {
	Node string `json:"node"`
	// Servers are the NATS servers the node's connection knows,
	// credentials removed; Connected marks the one it is on.
	Servers []NATSServer `json:"servers"`
	// StreamLeader is the NATS server leading the command stream (""
	// with StreamError saying why when it has none or did not answer).
	StreamLeader string          `json:"stream_leader"`
	StreamError  string          `json:"stream_error,omitempty"`
	Replicas     []StreamReplica `json:"replicas,omitempty"`
}

// NATSServer is one NATS server of a ClusterInfra.
type NATSServer struct {
	URL       string `json:"url"`
	Connected bool   `json:"connected"`
}

// StreamReplica is one follower of the command stream as its leader
// reports it: current (caught up), offline, seen ActiveSeconds ago, Lag
// operations behind.
type StreamReplica struct {
	Name          string  `json:"name"`
	Current       bool    `json:"current"`
	Offline       bool    `json:"offline"`
	ActiveSeconds float64 `json:"active_seconds"`
	Lag           uint64  `json:"lag"`
}

// Session is one connected sync session in the answer of PathSessions.
type Session struct {
	ClientID string `json:"client_id"`
	Tenant   string `json:"tenant"`
	// User is the user the session's token acts for (a JWT's sub, a
	// token's --user); "" when the token names none.
	User        string    `json:"user,omitempty"`
	TokenID     string    `json:"token_id"`
	Remote      string    `json:"remote"`
	ConnectedAt time.Time `json:"connected_at"`
	// Cursor is the last sequence the session's feed delivered.
	Cursor uint64 `json:"cursor"`
	// Subscribed says the session has a live feed: only then is the head
	// minus Cursor the entries the device has yet to receive (a session
	// that never subscribed, or whose feed ended, is behind nothing).
	Subscribed bool `json:"subscribed"`
	// PendingPushes counts the session's pushes not yet answered.
	PendingPushes int64 `json:"pending_pushes"`
	// LastPushAt and LastPushOps are the device's last push to this node
	// (any of its sessions) and its mutations; zero before its first.
	LastPushAt  time.Time `json:"last_push_at,omitzero"`
	LastPushOps int       `json:"last_push_ops,omitempty"`
	// LastError is the code of the last error the device's pushes got
	// here (a push refused whole, or the first refused write of a push),
	// at LastErrorAt; "" when none.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

// RecentDevice is a device that disconnected from a node lately (the
// answer of PathRecentDevices): its last push and last error, as in
// Session.
type RecentDevice struct {
	Tenant         string    `json:"tenant"`
	ClientID       string    `json:"client_id"`
	LastPushAt     time.Time `json:"last_push_at,omitzero"`
	LastPushOps    int       `json:"last_push_ops,omitempty"`
	LastError      string    `json:"last_error,omitempty"`
	LastErrorAt    time.Time `json:"last_error_at,omitzero"`
	DisconnectedAt time.Time `json:"disconnected_at"`
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
	Tenant   string `json:"tenant"`
	ClientID string `json:"client_id"`
	// User is the user whose device namespace holds ClientID
	// (UserOfClientID); "" when the client id is in none.
	User      string    `json:"user,omitempty"`
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
	OpID string `json:"op_id,omitempty"`
	// ClientID is the writing device, when the server recorded it, and
	// User the user whose device namespace holds it (UserOfClientID).
	ClientID string              `json:"client_id,omitempty"`
	User     string              `json:"user,omitempty"`
	Version  uint64              `json:"version"`
	Value    json.RawMessage     `json:"value,omitempty"`
	HLC      syncproto.Timestamp `json:"hlc,omitzero"`
	Deleted  bool                `json:"deleted"`
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
	// ClientID is the device that sent the op, and User the user whose
	// device namespace holds it (UserOfClientID), when the oplog still
	// retains the entry the op made (applied ops only).
	ClientID string `json:"client_id,omitempty"`
	User     string `json:"user,omitempty"`
	// Floor is the tenant's ledger floor: an op of the tenant that is not
	// held and is at or before it would be answered "expired" if resent.
	Floor time.Time `json:"floor,omitzero"`
}

// UserOfClientID is the user a device chose its client id for, read from
// the id's device namespace (syncproto.DeviceNamespace): "alice" for
// "alice:phone". A namespace that is a digest ("_3f2a...:tablet") does
// not name its user and gives "", as does an id outside any namespace
// (a token-file token's). syncd shows it beside the ledger, the oplog and
// the conflict log, which store the client id and not the user.
func UserOfClientID(clientID string) string {
	user, device, ok := strings.Cut(clientID, ":")
	if !ok || device == "" || user == "" || strings.HasPrefix(user, "_") || syncproto.DeviceNamespace(user) != user+":" {
		return ""
	}
	return user
}

// DenyList is the answer of GET PathDeny: the JWT deny list in force
// (syncd's deny-list file holds the same, with its version).
type DenyList struct {
	// JTIs are single tokens.
	JTIs []DeniedJTI `json:"jtis"`
	// Users are users whose tokens issued (iat) at or before a time are
	// refused.
	Users []DeniedUser `json:"users"`
}

// DeniedJTI is one denied token, refused until ExpiresAt (its exp; zero:
// until removed); past it the entry is pruned.
type DeniedJTI struct {
	JTI       string    `json:"jti"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// DeniedUser is one denied user: tokens issued (iat) at or before
// RevokedAt, or without iat, are refused until Until (zero: until
// removed); past it the entry is pruned and denies nothing.
type DeniedUser struct {
	User      string    `json:"user"`
	RevokedAt time.Time `json:"revoked_at"`
	Until     time.Time `json:"until,omitzero"`
}

// Denial is the body of POST PathDeny: exactly one of JTI and User, in
// force until Until (zero: until removed; for a jti, its exp lets the
// entry be pruned once the token expired anyway). RevokedAt, for a user
// only, is the instant the user's tokens are refused up to (zero: the
// node's clock at the change); at most MaxRevokedAtAhead after the
// node's clock. Giving every node of a cluster the same instant (syncctl
// jwt revoke --server with several nodes does) writes the same entry on
// each.
type Denial struct {
	JTI       string    `json:"jti,omitempty"`
	User      string    `json:"user,omitempty"`
	Until     time.Time `json:"until,omitzero"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// MaxRevokedAtAhead bounds how far a Denial's RevokedAt may be ahead of
// the clock of the node that applies it: the clocks of the operator's
// machine and of the nodes differ a little, but a revocation dated later
// would refuse tokens the provider has not issued yet.
const MaxRevokedAtAhead = time.Minute

// DenyChange answers a POST or DELETE of PathDeny: the list as written
// and, for a POST, how many open sessions the change closed (they were
// sent unauthorized and closed 1008 before the answer).
type DenyChange struct {
	List           DenyList `json:"list"`
	ClosedSessions int      `json:"closed_sessions"`
}

// Figures is the answer of PathFigures: running totals since the process
// started, read from the same instruments /metrics exports. Two answers
// taken apart give rates (mutations applied per second) and the push ack
// latency of the interval between them.
type Figures struct {
	At time.Time `json:"at"`
	// Ready is what /readyz answers (false while draining, without a
	// database, or on a cluster node that must not serve); NotReady says
	// why.
	Ready    bool   `json:"ready"`
	NotReady string `json:"not_ready,omitempty"`
	// Pushes counts push messages answered (syncd_pushes_total).
	Pushes uint64 `json:"pushes"`
	// Mutations counts pushed mutations by result status
	// (syncd_mutations_total).
	Mutations map[string]uint64 `json:"mutations"`
	// Ack is the time from a push's arrival at the committer to its
	// durable commit, after which it is answered
	// (syncd_apply_duration_seconds).
	Ack Histogram `json:"ack"`
	// TenantMutations counts the mutations each tenant pushed to this
	// node since it started (every tenant seen; a reader samples it for
	// per-tenant rates, as the console's tenants page does).
	TenantMutations map[string]uint64 `json:"tenant_mutations,omitempty"`
	// Alerts are the conditions the server itself knows to be wrong now
	// (an open conflict hook breaker, a drain, a cluster node that does
	// not serve); the rules of docs/alerts evaluate the rest in
	// Prometheus.
	Alerts []Alert `json:"alerts"`
}

// Histogram is a cumulative histogram: Buckets[i].Count observations were
// at most Buckets[i].UpperBound seconds.
type Histogram struct {
	Count   uint64   `json:"count"`
	Sum     float64  `json:"sum"`
	Buckets []Bucket `json:"buckets"`
}

// Bucket is one cumulative bucket of a Histogram.
type Bucket struct {
	UpperBound float64 `json:"le"`
	Count      uint64  `json:"count"`
}

// Alert is one condition the server knows to be wrong.
type Alert struct {
	// Name is stable (hook_breaker_open, hook_breaker_half_open,
	// draining, not_ready, cluster_node_not_ready); Detail is for people.
	Name   string `json:"name"`
	Detail string `json:"detail"`
}

// Disconnected is the answer of PathDisconnect.
type Disconnected struct {
	Tenant   string `json:"tenant"`
	ClientID string `json:"client_id"`
	// Sessions counts the sessions told to end (a device may hold more
	// than one, briefly, while it reconnects).
	Sessions int `json:"sessions"`
}

// TenantsPage is the answer of PathTenants.
type TenantsPage struct {
	Tenants []Tenant `json:"tenants"`
	// Truncated is true when more tenants follow the page (its Next).
	Truncated bool `json:"truncated"`
	// Next is the ParamAfter of the following page, "" on the last.
	Next string `json:"next,omitempty"`
}

// Tenant is one tenant as this node sees it.
type Tenant struct {
	Tenant string `json:"tenant"`
	// Sessions counts its open sessions on this node; PendingPushes their
	// pushes not yet answered; MaxLagEntries the largest head-minus-cursor
	// among them.
	Sessions      int    `json:"sessions"`
	PendingPushes int64  `json:"pending_pushes"`
	MaxLagEntries uint64 `json:"max_lag_entries"`
	// OplogFloor is the newest of its oplog entries that retention
	// compacted away (0: none).
	OplogFloor uint64 `json:"oplog_floor"`
	// Snapshots counts its snapshot downloads running or waiting here.
	Snapshots int `json:"snapshots"`
	// MutationsServed counts the mutations this node's committer took
	// from the tenant's line since it started (single node; the
	// syncd_commit_served_mutations_total series of the tenant, absent
	// beyond its label bound, where tenants share "~other").
	MutationsServed uint64 `json:"mutations_served"`
	// OplogEntries counts its retained oplog entries (the whole cluster's
	// log on a cluster node: every node holds the same).
	OplogEntries uint64 `json:"oplog_entries"`
	// QuotaRefusals counts its pushes and upgrades a quota refused here
	// since start (syncd_quota_refusals_total, by tenant).
	QuotaRefusals uint64 `json:"quota_refusals"`
	// MutationsPushed counts the mutations it pushed to this node since
	// start (Figures.TenantMutations).
	MutationsPushed uint64 `json:"mutations_pushed"`
}

// TokensPage is the answer of GET PathTokens: one page of the token
// file's tokens, sorted by id. Secrets are never in it.
type TokensPage struct {
	Tokens []TokenInfo `json:"tokens"`
	// Next is the ParamAfter of the following page, "" on the last.
	Next string `json:"next,omitempty"`
	// Total counts every token of the file.
	Total int `json:"total"`
}

// TokenInfo is one token of the token file: its id (safe to log and to
// revoke by) and what it may do.
type TokenInfo struct {
	ID string `json:"id"`
	// TokenRequest is what the token may do, as it was issued.
	TokenRequest
	// CreatedAt is when the token was issued.
	CreatedAt time.Time `json:"created_at"`
	// Sessions counts its open sync sessions on this node.
	Sessions int `json:"sessions"`
}

// TokenRequest is the body of POST PathTokens: the principal of the token
// to issue. An admin token (it authorises the admin API only) names
// nothing else; a device's token names its tenant and client id, and the
// models it may read and write ("*": every model).
type TokenRequest struct {
	Admin    bool                `json:"admin,omitempty"`
	Tenant   string              `json:"tenant,omitempty"`
	User     string              `json:"user,omitempty"`
	ClientID string              `json:"client_id,omitempty"`
	Read     []string            `json:"read,omitempty"`
	Write    []string            `json:"write,omitempty"`
	Scopes   map[string][]string `json:"scopes,omitempty"`
}

// IssuedToken is the answer of POST PathTokens. Bearer is the token
// itself: shown here once, never again.
type IssuedToken struct {
	Token  TokenInfo `json:"token"`
	Bearer string    `json:"bearer"`
}

// TokenRevoked is the answer of DELETE PathTokens.
type TokenRevoked struct {
	TokenID string `json:"token_id"`
	// ClosedSessions counts the open sessions the revocation ended.
	ClosedSessions int `json:"closed_sessions"`
}
