package checker

import (
	"slices"
	"time"

	"github.com/syncd-dev/syncd/soak/journal"
	"github.com/syncd-dev/syncd/syncproto"
)

// State is everything the checker judges: what the server, every client and
// the harness left behind at quiescence. Load reads it from files; tests
// build or doctor it directly. Check only reads it.
type State struct {
	Server  Server
	Clients []Client
	Process Process
}

// Server is syncd's database as the checker reads it.
type Server struct {
	// Policies maps a model to its declared policy ("lww" or
	// "optimistic"); undeclared models are last-writer-wins.
	Policies map[string]string
	// Oplog holds every retained entry in seq order.
	Oplog []OplogEntry
	// Head is the highest seq the log ever assigned (it survives
	// compaction); AppliedSeq is how far the records are materialized.
	Head       uint64
	AppliedSeq uint64
	Records    []Record
	Ledger     []Decision
	// LedgerFloors maps a tenant to its ledger floor: ops of the tenant
	// stamped at or before it may have left the ledger. LedgerBaseFloor is
	// the floor every tenant has at least (a ledger migrated from the
	// single floor of schema version 1); zero when none. Read them with
	// LedgerFloor.
	LedgerFloors    map[string]time.Time
	LedgerBaseFloor time.Time
	Conflicts       []Conflict
	// Integrity holds the rows of PRAGMA integrity_check: ["ok"] when sound.
	Integrity []string
	// Scopes are the declared scopes (partial sync): nil when none.
	Scopes []Scope
}

// Scope is one declared scope as the checker needs it: the models it
// covers and its membership model ("" when none), whose live records grant
// their scope value to the user in their Member.
type Scope struct {
	Name       string
	Models     []string
	Membership string
}

// OplogEntry is one applied write.
type OplogEntry struct {
	Seq      uint64
	Tenant   string
	Model    string
	Key      string
	OpID     string
	Op       string // put or delete
	Value    []byte
	Version  uint64
	HLC      syncproto.Timestamp
	ClientID string
	// ScopeOld and ScopeValue are the record's scope value before and
	// after the write ("" outside scoped models); Member the user a live
	// membership row grants its value to after it ("" otherwise). Grants
	// are the membership grants the server recorded the write changed.
	ScopeOld   string
	ScopeValue string
	Member     string
	Grants     []GrantChange
}

// GrantChange is one membership grant an oplog entry changed, as the
// server recorded it (the oplog's grants column): User gained (Held) or
// lost the scope value.
type GrantChange struct {
	User  string `json:"user"`
	Scope string `json:"scope"`
	Value string `json:"value"`
	Held  bool   `json:"held"`
}

// Record is the server's current state of one key.
type Record struct {
	Tenant  string
	Model   string
	Key     string
	Value   []byte
	Version uint64
	HLC     syncproto.Timestamp
	Deleted bool
	OpID    string
	Seq     uint64
	// ScopeValue is the record's scope value ("" outside scoped models);
	// Member the user a live membership row grants it to.
	ScopeValue string
	Member     string
}

// Decision is one replay-ledger row: what was decided for an op, the first
// time it was heard.
type Decision struct {
	Tenant string
	OpID   string
	Result syncproto.Result
}

// Conflict is one conflict-log row.
type Conflict struct {
	Tenant, Model, Key string
	Policy, Reason     string
	LoserOpID          string
	LoserVersion       uint64
	LoserHLC           syncproto.Timestamp
	WinnerOpID         string
	WinnerVersion      uint64
	WinnerHLC          syncproto.Timestamp
}

// Client is one soak client's files: its journal, queue and replica.
type Client struct {
	ID     string
	Tenant string
	// Read lists the models its token may read; "*" is every model.
	Read []string
	// User is the user its token acts for (membership rows name it);
	// Grants the scope values its token grants ("*": every value); Want
	// the values it requests (nil: every value granted).
	User    string
	Grants  syncproto.ScopeSet
	Want    syncproto.ScopeSet
	Journal []journal.Entry
	Queue   Queue
	Replica Replica
}

// CanRead reports whether the client's token may read model.
func (c *Client) CanRead(model string) bool {
	return slices.Contains(c.Read, "*") || slices.Contains(c.Read, model)
}

// scopeOf returns the declared scope covering model, or nil.
func (s *Server) scopeOf(model string) *Scope {
	for i := range s.Scopes {
		if slices.Contains(s.Scopes[i].Models, model) {
			return &s.Scopes[i]
		}
	}
	return nil
}

// membershipScope returns the declared scope whose membership model is
// model, or nil.
func (s *Server) membershipScope(model string) *Scope {
	for i := range s.Scopes {
		if s.Scopes[i].Membership != "" && s.Scopes[i].Membership == model {
			return &s.Scopes[i]
		}
	}
	return nil
}

// follows reports whether client c, at quiescence, holds rows of value of
// scope sc: its token or a live membership row of its user grants the
// value, and its request names it (or names none).
func (s *Server) follows(c *Client, sc *Scope, value string) bool {
	if c.Want != nil && !c.Want.Has(sc.Name, value) {
		return false
	}
	if c.Grants.Has(sc.Name, value) {
		return true
	}
	if sc.Membership == "" || c.User == "" {
		return false
	}
	for i := range s.Records {
		r := &s.Records[i]
		if r.Tenant == c.Tenant && r.Model == sc.Membership && !r.Deleted && r.Member == c.User && r.ScopeValue == value {
			return true
		}
	}
	return false
}

// Queue is a client's durable queue at quiescence.
type Queue struct {
	// Kind is ndjson, sqlite or memory (a memory queue leaves nothing
	// behind: it reads as empty).
	Kind        string
	Pending     []QueueItem
	DeadLetters []DeadLetter
	// Integrity is ["ok"] when the queue's file is sound: PRAGMA
	// integrity_check for SQLite, a clean load for NDJSON.
	Integrity []string
}

// QueueItem is one pending item; its idempotency key is the op id.
type QueueItem struct {
	ID       uint64
	OpID     string
	Attempts uint32
}

// DeadLetter is one item of the dead-letter store.
type DeadLetter struct {
	QueueItem
	Reason string
}

// Replica is a client's local replica.
type Replica struct {
	Records []ReplicaRecord
	// Pending holds the op ids of the pending overlay (writes not yet
	// decided, laid over the records).
	Pending  []string
	Outcomes map[string]Outcome
	Cursor   uint64
	// Integrity holds the rows of PRAGMA integrity_check.
	Integrity []string
}

// ReplicaRecord is one record as the replica holds it.
type ReplicaRecord struct {
	Model   string
	Key     string
	Value   []byte
	Version uint64
	Deleted bool
}

// Outcome is a write's durable outcome as the client recorded it.
type Outcome struct {
	OpID      string
	Model     string
	Key       string
	Status    string // applied, superseded, conflict, dead_lettered
	Version   uint64
	Seq       uint64
	Reason    string
	RebasedAs string
	DecidedAt time.Time // by the client's clock
}

// Process is syncd's goroutine and file-descriptor counts: the baseline
// taken after its last start (before any client could connect) and the
// count once every client had disconnected at quiescence. Tolerance says
// how far above the baseline each count may end.
type Process struct {
	// Measured is false when the harness could not take both samples.
	Measured bool
	// Error says why not, when it could not.
	Error     string
	Baseline  Sample
	Final     Sample
	Tolerance Sample
}

// Sample is one reading of syncd's counts: goroutines and open files from
// its /metrics, and how many of those files are its SQLite database's own
// (the database, its WAL and shared-memory files), where the platform lets
// the harness tell (0 elsewhere).
type Sample struct {
	Goroutines  int
	FDs         int
	DatabaseFDs int
}

// LedgerFloor is tenant's ledger floor: zero when the ledger never evicted
// a decision of the tenant, so every decision of it must be there. One
// tenant's floor says nothing of another's.
func (s *Server) LedgerFloor(tenant string) time.Time {
	f := s.LedgerBaseFloor
	if t := s.LedgerFloors[tenant]; t.After(f) {
		f = t
	}
	return f
}
