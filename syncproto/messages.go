package syncproto

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Type is a message's "type" field.
type Type string

// Message types. Requests go from client to server and carry an "id" that
// their answers echo; the rest go from server to client.
const (
	TypeHello       Type = "hello"       // request; answered by welcome
	TypePush        Type = "push"        // request; answered by push_result
	TypePull        Type = "pull"        // request; answered by changes or resync
	TypeSubscribe   Type = "subscribe"   // request; answered by changes (repeatedly) or resync
	TypeUnsubscribe Type = "unsubscribe" // request; answered by pong
	TypePing        Type = "ping"        // request; answered by pong

	TypeWelcome    Type = "welcome"
	TypePushResult Type = "push_result"
	TypeChanges    Type = "changes"
	TypeResync     Type = "resync"
	TypeError      Type = "error"
	TypePong       Type = "pong"
	TypeBackfill   Type = "backfill"
)

// IsRequest reports whether t is a client-to-server message type.
func (t Type) IsRequest() bool {
	switch t {
	case TypeHello, TypePush, TypePull, TypeSubscribe, TypeUnsubscribe, TypePing:
		return true
	}
	return false
}

// Message is one protocol message: a frame's decoded form. The concrete
// types are the pointer types of this package (*Hello, *Push, ..., *Error);
// the set is closed.
type Message interface {
	// Type returns the message's "type".
	Type() Type
	// RequestID returns the "id": the request's own id, or for an answer the
	// id of the request it answers ("" for an error about the connection).
	RequestID() string
	// Validate reports whether every field obeys PROTOCOL.md. The error is
	// an *Error. A push's mutations are not validated here: each is checked
	// on its own (Mutation.Validate) and refused in its own Result.
	Validate() error

	message()
}

// newMessage returns a zero message of type t, or nil for an unknown type.
func newMessage(t Type) Message {
	switch t {
	case TypeHello:
		return new(Hello)
	case TypePush:
		return new(Push)
	case TypePull:
		return new(Pull)
	case TypeSubscribe:
		return new(Subscribe)
	case TypeUnsubscribe:
		return new(Unsubscribe)
	case TypePing:
		return new(Ping)
	case TypeWelcome:
		return new(Welcome)
	case TypePushResult:
		return new(PushResult)
	case TypeChanges:
		return new(Changes)
	case TypeResync:
		return new(Resync)
	case TypeError:
		return new(Error)
	case TypePong:
		return new(Pong)
	case TypeBackfill:
		return new(Backfill)
	}
	return nil
}

// Hello opens a session. It must be the connection's first message, and
// only one is allowed.
type Hello struct {
	ID string `json:"id"`
	// ClientID is the client's id; it must be the one the token may act as.
	ClientID string `json:"client_id"`
	// Cursor is the oplog seq the client has applied up to (0 = none). The
	// server records it as the client's position and refuses one beyond its
	// head (CodeCursorAhead); the change feed starts from pull's or
	// subscribe's own cursor.
	Cursor uint64 `json:"cursor"`
	// HLC is the client's current clock reading; its origin is ClientID.
	HLC Timestamp `json:"hlc"`
	// DatabaseID, optional, names the database (welcome.database_id) the
	// client's cursor came from. When it names another database than the
	// server's, the cursor means nothing here: the server does not refuse
	// it as cursor_ahead, welcomes the client (which then resyncs from a
	// snapshot, seeing welcome's database_id) and counts a resync.
	DatabaseID string `json:"database_id,omitempty"`

	// decodeErrs: members whose JSON did not fit (UnmarshalJSON), reported
	// by Validate in the member's place.
	decodeErrs memberErrors
}

// UnmarshalJSON decodes hello so that a member of the wrong JSON type or an
// unparsable hlc is reported by Validate in its place in the member order,
// with its member's code, whatever the order of the members in the frame.
func (m *Hello) UnmarshalJSON(b []byte) error {
	type plain Hello // the fields without this method
	var p plain
	if json.Unmarshal(b, &p) == nil {
		*m = Hello(p)
		return nil
	}
	*m = Hello{}
	var raw struct {
		ID       json.RawMessage `json:"id"`
		ClientID json.RawMessage `json:"client_id"`
		Cursor   json.RawMessage `json:"cursor"`
		HLC      json.RawMessage `json:"hlc"`
		Database json.RawMessage `json:"database_id"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	m.decodeErrs = decodeFields([]field{
		{"id", raw.ID, &m.ID, CodeBadRequest},
		{"client_id", raw.ClientID, &m.ClientID, CodeInvalidClientID},
		{"cursor", raw.Cursor, &m.Cursor, CodeBadRequest},
		{"hlc", raw.HLC, &m.HLC, CodeInvalidHLC},
		{"database_id", raw.Database, &m.DatabaseID, CodeBadRequest},
	})
	return nil
}

// Welcome answers hello: the session is open.
type Welcome struct {
	ID string `json:"id"`
	// NodeID is the id of the server node, the origin of its timestamps.
	NodeID string `json:"node_id"`
	// ServerHLC is the server's clock reading after observing hello's hlc.
	// It may run ahead of the server's wall time (it has observed the
	// fastest timestamps within the skew bound), so a client never
	// estimates its clock offset from it: see ServerTime.
	ServerHLC Timestamp `json:"server_hlc"`
	// ServerTime is the server's own wall clock, in milliseconds since the
	// Unix epoch, read when welcome was sent. A client estimates its clock
	// offset from it (PROTOCOL.md 9.3).
	ServerTime int64 `json:"server_time_ms"`
	// DatabaseID names the database the oplog seqs (head, cursors) belong
	// to: one id per single-node database or per cluster, kept for its
	// life. A client whose replica was synced from another database id
	// resyncs from a snapshot instead of resuming at its cursor.
	DatabaseID string `json:"database_id"`
	// Head is the newest oplog seq at the time of the answer.
	Head uint64 `json:"head"`
	// Limits are what this server enforces on this connection.
	Limits Limits `json:"limits"`
	// Models are the declared models the token may use, by name.
	Models map[string]ModelAccess `json:"models"`
	// LedgerFloorMS is the tenant's ledger floor, in milliseconds since
	// the Unix epoch: an op not yet decided whose hlc wall is at or before
	// it is answered expired. 0 (absent): nothing was ever evicted, so no
	// op of the tenant is expired.
	LedgerFloorMS int64 `json:"ledger_floor_ms,omitempty"`
	// DefaultPolicy is the policy of a model Models does not list: a
	// policy, or PolicyNone when the server refuses undeclared models
	// (invalid_model). Absent (from an older server) means PolicyLWW.
	DefaultPolicy Policy `json:"default_policy,omitempty"`
	// User is the user the connection's token acts for, absent when the
	// token names none.
	User string `json:"user,omitempty"`
	// Tenant, optional, is the tenant the connection's token belongs to:
	// every seq, ledger decision and record the session sees is this
	// tenant's. A client may keep it to name its data to operators (the
	// admin API asks for it); absent from an older server.
	Tenant string `json:"tenant,omitempty"`
	// ServerBuild, optional, names the server's build (release version,
	// source revision): for logs and support, never for deciding what the
	// client does, which follows the members above.
	ServerBuild string `json:"server_build,omitempty"`
	// Servers, optional, are the public base URLs of the servers through
	// which this database is reached (this one's included, on a cluster
	// every node's, as their operator configured them). A client may add
	// them to the URLs it was configured with, to fail over to another
	// node; it never follows one to a weaker scheme (http after https).
	Servers []string `json:"servers,omitempty"`
	// ValueVersions, optional, lists by model the value versions the
	// server accepts (ascending, at most MaxAcceptedVersions each) for the
	// models that declare versions; a model it does not list takes writes
	// of every version as they are (it does not check their shape). The list holds for the connection: a device resumes
	// a model paused by CodeNeedsUpgrade when a welcome lists the version
	// its oldest queued write carries.
	ValueVersions map[string][]uint64 `json:"value_versions,omitempty"`
	// Scopes, optional, are the declared scopes (PROTOCOL.md section 19)
	// that cover a model the token may read or write, by name.
	Scopes map[string]ScopeInfo `json:"scopes,omitempty"`
	// Grants, optional, are the scope values the principal holds when the
	// welcome is sent (from its token and from membership rows), at most
	// Limits.MaxScopeValues of them; AllValues means every value.
	Grants ScopeSet `json:"grants,omitempty"`
}

// Policy is a model's conflict policy, as a client sees it.
type Policy string

// Conflict policies.
const (
	// PolicyLWW: the write with the higher hlc wins; a losing write is
	// answered superseded.
	PolicyLWW Policy = "lww"
	// PolicyOptimistic: every write carries base_version; a stale one is
	// answered conflict with the winner.
	PolicyOptimistic Policy = "optimistic"
	// PolicyHook: a server-side resolver decides (falling back to LWW); a
	// client sees lww's answers.
	PolicyHook Policy = "hook"
	// PolicyNone, only as Welcome.DefaultPolicy: the server refuses writes
	// to models it does not declare (invalid_model).
	PolicyNone Policy = "none"
)

// Valid reports whether p is one of the defined policies.
func (p Policy) Valid() bool {
	return p == PolicyLWW || p == PolicyOptimistic || p == PolicyHook
}

// ModelAccess is what a token may do with one model.
type ModelAccess struct {
	Policy Policy `json:"policy"`
	Read   bool   `json:"read"`
	Write  bool   `json:"write"`
}

// Push sends a batch of mutations. The server decides them in order, in one
// transaction, and answers with one Result per mutation in the same order.
type Push struct {
	ID        string     `json:"id"`
	Mutations []Mutation `json:"mutations"`
}

// PushResult answers push.
type PushResult struct {
	ID string `json:"id"`
	// Results has one entry per pushed mutation, in push order.
	Results []Result `json:"results"`
}

// Pull asks for one page of the change feed after Cursor.
type Pull struct {
	ID string `json:"id"`
	// Cursor is the seq to read after (0 = from the beginning).
	Cursor uint64 `json:"cursor"`
	// Limit caps the entries returned, 1..MaxPullLimit; 0 means
	// DefaultPullLimit.
	Limit int `json:"limit,omitempty"`
	// Scopes, optional, are the scope values to read (as in Subscribe).
	Scopes ScopeSet `json:"scopes,omitzero"`
}

// Subscribe starts (or restarts) the connection's live change feed after
// Cursor: catch-up pages, then new entries as they are applied.
type Subscribe struct {
	ID     string `json:"id"`
	Cursor uint64 `json:"cursor"`
	// Scopes, optional, are the scope values the device wants: a subset of
	// its grants, or AllValues for every value granted now or later. Absent
	// (nil), the subscription follows every grant and is answered resync
	// (ResyncScopesChanged) instead of evictions. A scope present with no
	// values, or absent from a present set, delivers none of its rows.
	Scopes ScopeSet `json:"scopes,omitzero"`
	// Have, optional, are the scope values the device holds complete at
	// Cursor: the server backfills the wanted values not in Have, and
	// evicts the values in Have that are no longer wanted or granted.
	Have ScopeSet `json:"have,omitzero"`
	// Resume, optional, continues interrupted backfills: by scope, by value
	// (wanted, not in Have), the last_key of the last backfill page the
	// device applied.
	Resume map[string]map[string]string `json:"resume,omitzero"`
}

// Unsubscribe stops the connection's live change feed.
type Unsubscribe struct {
	ID string `json:"id"`
}

// Ping asks for a pong; it also keeps an idle connection open.
type Ping struct {
	ID string `json:"id"`
}

// Pong answers ping and unsubscribe.
type Pong struct {
	ID string `json:"id"`
}

// Changes is one page of the change feed, answering pull or delivered for a
// subscription (ID is then the subscribe request's id).
type Changes struct {
	ID string `json:"id"`
	// Entries are in increasing seq order, scoped to the token's tenant and
	// readable models; seqs may have gaps.
	Entries []Change `json:"entries"`
	// Cursor is the seq to resume after: at least the last entry's seq, and
	// beyond it when later entries were not visible to this token.
	Cursor uint64 `json:"cursor"`
	// Head is the newest oplog seq when the page was read.
	Head uint64 `json:"head"`
	// More reports that entries after Cursor existed when the page was read:
	// for pull, ask again from Cursor; for a subscription, more pages follow.
	More bool `json:"more"`
	// Evictions, optional, are scope values the device must drop, applied
	// after Entries.
	Evictions []Eviction `json:"evictions,omitempty"`
}

// Resync answers pull or subscribe whose cursor is older than the retained
// oplog: the client must reload from a snapshot and resume at its head.
type Resync struct {
	ID string `json:"id"`
	// Reason says why; ResyncCursorExpired is the only reason in v1.
	Reason string `json:"reason"`
	// SnapshotURL is where to GET the snapshot, resolved against the http(s)
	// form of the websocket URL; SnapshotPath in v1.
	SnapshotURL string `json:"snapshot_url"`
	// Head is the newest oplog seq when the answer was sent.
	Head uint64 `json:"head"`
}

// ResyncCursorExpired is Resync.Reason for a cursor older than the oldest
// retained oplog entry.
const ResyncCursorExpired = "cursor_expired"

func (*Hello) Type() Type       { return TypeHello }
func (*Welcome) Type() Type     { return TypeWelcome }
func (*Push) Type() Type        { return TypePush }
func (*PushResult) Type() Type  { return TypePushResult }
func (*Pull) Type() Type        { return TypePull }
func (*Subscribe) Type() Type   { return TypeSubscribe }
func (*Unsubscribe) Type() Type { return TypeUnsubscribe }
func (*Ping) Type() Type        { return TypePing }
func (*Pong) Type() Type        { return TypePong }
func (*Changes) Type() Type     { return TypeChanges }
func (*Resync) Type() Type      { return TypeResync }
func (*Error) Type() Type       { return TypeError }

func (m *Hello) RequestID() string       { return m.ID }
func (m *Welcome) RequestID() string     { return m.ID }
func (m *Push) RequestID() string        { return m.ID }
func (m *PushResult) RequestID() string  { return m.ID }
func (m *Pull) RequestID() string        { return m.ID }
func (m *Subscribe) RequestID() string   { return m.ID }
func (m *Unsubscribe) RequestID() string { return m.ID }
func (m *Ping) RequestID() string        { return m.ID }
func (m *Pong) RequestID() string        { return m.ID }
func (m *Changes) RequestID() string     { return m.ID }
func (m *Resync) RequestID() string      { return m.ID }
func (e *Error) RequestID() string       { return e.ID }

func (*Hello) message()       {}
func (*Welcome) message()     {}
func (*Push) message()        {}
func (*PushResult) message()  {}
func (*Pull) message()        {}
func (*Subscribe) message()   {}
func (*Unsubscribe) message() {}
func (*Ping) message()        {}
func (*Pong) message()        {}
func (*Changes) message()     {}
func (*Resync) message()      {}
func (*Error) message()       {}

// Validate checks hello's members in order, each by its JSON type and then
// its rule (PROTOCOL.md 5.1): request id, client id, cursor, and a
// non-zero hlc whose origin is the client id.
func (m *Hello) Validate() error {
	return m.decodeErrs.firstWrong([]check{
		{"id", func() error { return validateRequestID(m.ID) }},
		{"client_id", func() error { return ValidateID(m.ClientID) }},
		{"cursor", func() error { return validateSeq("cursor", m.Cursor) }},
		{"hlc", func() error {
			if err := validateStamp("hlc", m.HLC); err != nil {
				return err
			}
			if m.HLC.Origin != m.ClientID {
				return Errorf(CodeInvalidHLC, "hlc origin %q is not client_id %q", m.HLC.Origin, m.ClientID)
			}
			return nil
		}},
		{"database_id", func() error {
			if m.DatabaseID != "" && !isID(m.DatabaseID) {
				return Errorf(CodeBadRequest, "database_id %q must match %s", truncate(m.DatabaseID), IDPattern)
			}
			return nil
		}},
	})
}

// Validate checks welcome: answer id, node id, server hlc, head, limits and
// the model table.
func (m *Welcome) Validate() error {
	if err := validateRequestID(m.ID); err != nil {
		return err
	}
	if err := ValidateID(m.NodeID); err != nil {
		return err
	}
	if err := validateStamp("server_hlc", m.ServerHLC); err != nil {
		return err
	}
	if m.ServerTime <= 0 || m.ServerTime > MaxSafeInteger {
		return Errorf(CodeBadRequest, "server_time_ms = %d must be a positive integer", m.ServerTime)
	}
	if err := ValidateID(m.DatabaseID); err != nil {
		return prefixed(err, "database_id")
	}
	if err := validateSeq("head", m.Head); err != nil {
		return err
	}
	if err := m.Limits.Validate(); err != nil {
		return err
	}
	for name, access := range m.Models {
		if err := ValidateModel(name); err != nil {
			return err
		}
		if !access.Policy.Valid() {
			return Errorf(CodeBadRequest, "model %q: policy %q is not lww, optimistic or hook", name, access.Policy)
		}
	}
	for name, versions := range m.ValueVersions {
		if err := ValidateModel(name); err != nil {
			return err
		}
		if err := validateAccepted("value_versions", versions); err != nil {
			return prefixed(err, "model %q", name)
		}
	}
	if p := m.DefaultPolicy; p != "" && p != PolicyNone && !p.Valid() {
		return Errorf(CodeBadRequest, "default_policy %q is not lww, optimistic, hook or none", p)
	}
	if len(m.Servers) > MaxServers {
		return Errorf(CodeBadRequest, "servers lists %d URLs, more than %d", len(m.Servers), MaxServers)
	}
	for _, u := range m.Servers {
		if err := ValidateServerURL(u); err != nil {
			return prefixed(err, "servers")
		}
	}
	for name, info := range m.Scopes {
		if err := info.validate(name); err != nil {
			return err
		}
	}
	return m.Grants.Validate("grants", 0)
}

// Validate checks push's envelope: request id and 1..MaxBatch mutations.
// Each mutation is validated on its own with Mutation.Validate.
func (m *Push) Validate() error {
	if err := validateRequestID(m.ID); err != nil {
		return err
	}
	switch n := len(m.Mutations); {
	case n == 0:
		return Errorf(CodeBadRequest, "push holds no mutations")
	case n > MaxBatch:
		return Errorf(CodeBatchTooLarge, "push holds %d mutations, more than %d", n, MaxBatch)
	}
	return nil
}

// Validate checks push_result: answer id and 1..MaxBatch valid results.
func (m *PushResult) Validate() error {
	if err := validateRequestID(m.ID); err != nil {
		return err
	}
	switch n := len(m.Results); {
	case n == 0:
		return Errorf(CodeBadRequest, "push_result holds no results")
	case n > MaxBatch:
		return Errorf(CodeBatchTooLarge, "push_result holds %d results, more than %d", n, MaxBatch)
	}
	for i := range m.Results {
		if err := m.Results[i].Validate(); err != nil {
			return prefixed(err, "results[%d]", i)
		}
	}
	return nil
}

// Validate checks pull: request id, cursor and 0..MaxPullLimit limit.
func (m *Pull) Validate() error {
	if err := validateRequestID(m.ID); err != nil {
		return err
	}
	if err := validateSeq("cursor", m.Cursor); err != nil {
		return err
	}
	if m.Limit < 0 || m.Limit > MaxPullLimit {
		return Errorf(CodeBadRequest, "limit %d outside 0..%d", m.Limit, MaxPullLimit)
	}
	return m.Scopes.Validate("scopes", 0)
}

// Validate checks subscribe: request id, cursor and the shape of its
// scope members (the server checks counts and grants).
func (m *Subscribe) Validate() error {
	if err := validateRequestID(m.ID); err != nil {
		return err
	}
	if err := validateSeq("cursor", m.Cursor); err != nil {
		return err
	}
	if err := m.Scopes.Validate("scopes", 0); err != nil {
		return err
	}
	if err := m.Have.Validate("have", 0); err != nil {
		return err
	}
	for name, values := range m.Have {
		if slices.Contains(values, AllValues) {
			return Errorf(CodeInvalidScope, "have: scope %q: %q names no value a device can hold", name, AllValues)
		}
	}
	for name, byValue := range m.Resume {
		for v, last := range byValue {
			if err := ValidateScopeValue(v); err != nil {
				return prefixed(err, "resume: scope %q", name)
			}
			if last == "" || len(last) > MaxMessageBytes {
				return Errorf(CodeBadRequest, "resume: scope %q value %q: last_key must hold 1..%d bytes", name, truncate(v), MaxMessageBytes)
			}
		}
	}
	return nil
}

// Validate checks unsubscribe's request id.
func (m *Unsubscribe) Validate() error { return validateRequestID(m.ID) }

// Validate checks ping's request id.
func (m *Ping) Validate() error { return validateRequestID(m.ID) }

// Validate checks pong's answer id.
func (m *Pong) Validate() error { return validateRequestID(m.ID) }

// Validate checks changes: answer id, at most MaxPullLimit valid entries in
// strictly increasing seq order, and cursor <= head with cursor at or past
// the last entry.
func (m *Changes) Validate() error {
	if err := validateRequestID(m.ID); err != nil {
		return err
	}
	if len(m.Entries) > MaxPullLimit {
		return Errorf(CodeBadRequest, "changes holds %d entries, more than %d", len(m.Entries), MaxPullLimit)
	}
	var last uint64
	for i := range m.Entries {
		e := &m.Entries[i]
		if err := e.Validate(); err != nil {
			return prefixed(err, "entries[%d]", i)
		}
		if e.Seq <= last {
			return Errorf(CodeBadRequest, "entries[%d]: seq %d not after %d", i, e.Seq, last)
		}
		last = e.Seq
	}
	if err := validateSeq("cursor", m.Cursor); err != nil {
		return err
	}
	if err := validateSeq("head", m.Head); err != nil {
		return err
	}
	if m.Cursor < last {
		return Errorf(CodeBadRequest, "cursor %d before the last entry's seq %d", m.Cursor, last)
	}
	if m.Cursor > m.Head {
		return Errorf(CodeBadRequest, "cursor %d after head %d", m.Cursor, m.Head)
	}
	for i := range m.Evictions {
		if err := m.Evictions[i].Validate(); err != nil {
			return prefixed(err, "evictions[%d]", i)
		}
	}
	return nil
}

// Validate checks resync: answer id, reason, snapshot url and head.
func (m *Resync) Validate() error {
	if err := validateRequestID(m.ID); err != nil {
		return err
	}
	if m.Reason == "" || len(m.Reason) > MaxMessageBytes {
		return Errorf(CodeBadRequest, "reason must hold 1..%d bytes", MaxMessageBytes)
	}
	if m.SnapshotURL == "" || len(m.SnapshotURL) > MaxMessageBytes {
		return Errorf(CodeBadRequest, "snapshot_url must hold 1..%d bytes", MaxMessageBytes)
	}
	return validateSeq("head", m.Head)
}

// isCode reports whether c has the shape of every Code,
// ^[a-z][a-z0-9_]{0,63}$, including codes newer than this package.
func isCode(c Code) bool { return isLowerName(string(c), 63) }

// Validate checks an error message: optional id, a code-shaped code, message
// length and a non-negative retry delay.
func (e *Error) Validate() error {
	if e.ID != "" {
		if err := validateRequestID(e.ID); err != nil {
			return err
		}
	}
	if !isCode(e.Code) {
		return Errorf(CodeBadRequest, "code %q is not a code", truncate(string(e.Code)))
	}
	if len(e.Message) > MaxMessageBytes {
		return Errorf(CodeBadRequest, "message holds %d bytes, more than %d", len(e.Message), MaxMessageBytes)
	}
	if e.RetryAfterMS < 0 || e.RetryAfterMS > MaxSafeInteger {
		return Errorf(CodeBadRequest, "retry_after_ms %d out of range", e.RetryAfterMS)
	}
	return nil
}

// validateRequestID checks a request id: 1..MaxRequestIDBytes printable
// ASCII characters without space.
func validateRequestID(id string) error {
	if !validRequestID(id) {
		return Errorf(CodeBadRequest, "id must be 1..%d printable ASCII characters", MaxRequestIDBytes)
	}
	return nil
}

func validRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// validateSeq checks a cursor, seq, head or version against MaxSafeInteger.
func validateSeq(field string, v uint64) error {
	if v > MaxSafeInteger {
		return Errorf(CodeBadRequest, "%s %d exceeds %d", field, v, uint64(MaxSafeInteger))
	}
	return nil
}

// validateStamp checks a required hlc field: valid and non-zero.
func validateStamp(field string, t Timestamp) error {
	if t.IsZero() {
		return Errorf(CodeInvalidHLC, "%s is required", field)
	}
	if err := t.Validate(); err != nil {
		return prefixed(err, "%s", field)
	}
	return nil
}

// prefixed returns err (an *Error) with its message prefixed by a field
// path, so a nested refusal names where it happened.
func prefixed(err error, format string, args ...any) error {
	pe, ok := err.(*Error)
	if !ok {
		return err
	}
	c := *pe
	c.Message = capMessage(fmt.Sprintf(format, args...) + ": " + c.Message)
	return &c
}
