package adminapi

import (
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// The admin API's partial-sync paths (PROTOCOL.md section 19).
const (
	// PathScopes answers a ScopesPage: the declared scopes and, with
	// ParamTenant, the tenant's scope values with their grants and the
	// devices connected here that hold them, paged by ParamAfter and
	// ParamLimit (at most MaxScopeValuesPage); ParamScope narrows to one
	// scope, ParamValue to one value (with its members and devices
	// listed), ParamUser adds that user's grants.
	PathScopes = "/v1/admin/scopes"
	// PathScopesExplain answers a KeyExplanation: whether one key is on
	// one device's scopes and why. Parameters ParamTenant, ParamClientID,
	// ParamModel and ParamKey are required; ParamWant (repeated,
	// SCOPE:VALUE), when given, is the requested set the answer judges
	// with, instead of the set the server recorded at the device's last
	// subscribe (PROTOCOL.md 19.3); ParamUser overrides the user read from
	// the device's session, its recorded set or its client id.
	PathScopesExplain = "/v1/admin/scopes/explain"
)

// The partial-sync paths' query parameters.
const (
	// ParamScope selects one declared scope.
	ParamScope = "scope"
	// ParamValue selects one scope value (with ParamScope, or of the only
	// scope declared).
	ParamValue = "value"
	// ParamKey names one record's key.
	ParamKey = "key"
	// ParamWant is one requested value, SCOPE:VALUE (VALUE "*": every
	// value granted), repeated.
	ParamWant = "want"
)

// The partial-sync paths' limits.
const (
	// MaxScopeValuesPage bounds the values of one ScopesPage; it is also
	// the default page.
	MaxScopeValuesPage = 1000
	// MaxScopeValueMembers bounds the members and devices listed for one
	// value (ParamValue): the counts are exact beyond it.
	MaxScopeValueMembers = 1000
	// MaxExplainScan bounds the oplog entries one explanation reads for a
	// key's history: the newest, of the key's model and of its scope's
	// membership model (KeyExplanation.ScannedFrom says where it began).
	MaxExplainScan = 100000
)

// ScopesPage is the answer of PathScopes.
type ScopesPage struct {
	// Scopes are the declarations, sorted by name (empty when none).
	Scopes []ScopeDecl `json:"scopes"`
	// Tenant is the tenant the values and the user are of ("" when
	// ParamTenant was not given: declarations only).
	Tenant string `json:"tenant,omitempty"`
	// Values are the tenant's scope values that have live records, by
	// scope then value, at most one page.
	Values []ScopeValue `json:"values,omitempty"`
	// Next, when set, is the ParamAfter of the following page.
	Next string `json:"next,omitempty"`
	// User is ParamUser's grants.
	User *UserGrants `json:"user,omitempty"`
}

// ScopeDecl is one declared scope.
type ScopeDecl struct {
	Name string `json:"name"`
	// Models maps each covered model to the member of its value holding
	// the scope value.
	Models map[string]string `json:"models"`
	// Membership names the model whose rows grant values, when declared.
	Membership *syncproto.Membership `json:"membership,omitempty"`
}

// ScopeValue is one scope value of a tenant.
type ScopeValue struct {
	Scope string `json:"scope"`
	Value string `json:"value"`
	// Rows counts the live records of the value, membership rows included.
	Rows int `json:"rows"`
	// Members counts the users granted the value by live membership rows.
	Members int `json:"members"`
	// Devices counts the sessions connected to this node whose principal
	// holds the value (token or membership): the devices that may follow
	// it now.
	Devices int `json:"devices"`
	// Requesting counts the devices of the tenant, connected or not, to
	// any node of a cluster, whose recorded requested set (their last
	// subscribe with scopes) names the value or every value of its scope
	// ("*"), granted or not. At most replication's MaxRequestedDevices
	// sets are kept per tenant.
	Requesting int `json:"requesting"`
	// MemberRows and DeviceList are listed for ParamValue only, at most
	// MaxScopeValueMembers each.
	MemberRows []MemberRow `json:"member_rows,omitempty"`
	DeviceList []Device    `json:"device_list,omitempty"`
}

// MemberRow is one live membership row: the grant of Value to User,
// written at Seq.
type MemberRow struct {
	Value string `json:"value"`
	User  string `json:"user"`
	Model string `json:"model"`
	Key   string `json:"key"`
	Seq   uint64 `json:"seq"`
}

// Device is one connected session and the grants of its token.
type Device struct {
	ClientID string `json:"client_id"`
	User     string `json:"user,omitempty"`
	// TokenGrants are the declared scopes' grants its token carries.
	TokenGrants syncproto.ScopeSet `json:"token_grants,omitempty"`
}

// UserGrants is what one user of a tenant holds: membership rows, and the
// token grants of the user's devices connected here.
type UserGrants struct {
	User       string      `json:"user"`
	Membership []MemberRow `json:"membership"`
	// Grants are the membership grants by scope (what Membership adds up
	// to), without the token grants.
	Grants  syncproto.ScopeSet `json:"grants"`
	Devices []Device           `json:"devices"`
	// Truncated is true when the user holds more than MaxScopeValueMembers
	// membership rows: Membership holds the first by scope and value.
	Truncated bool `json:"truncated,omitempty"`
}

// The verdicts of a KeyExplanation.
const (
	// KeyUnscoped: the model is covered by no scope; every device that may
	// read the model holds the key.
	KeyUnscoped = "unscoped"
	// KeyNotFound: the tenant has no record of the key.
	KeyNotFound = "not_found"
	// KeyOnScopes: the device is granted the key's scope value (and
	// requests it, or its request is unknown: RequestedFrom is empty).
	KeyOnScopes = "on_scopes"
	// KeyNotGranted: the device's principal does not hold the value.
	KeyNotGranted = "not_granted"
	// KeyNotRequested: granted, but not in the device's request
	// (RequestedFrom says which: ParamWant's or the recorded one).
	KeyNotRequested = "not_requested"
)

// KeyExplanation is the answer of PathScopesExplain.
type KeyExplanation struct {
	Tenant   string `json:"tenant"`
	ClientID string `json:"client_id"`
	// User is the device's user: of its session here, else of its client
	// id's namespace, else ParamUser ("" when none is known: membership
	// grants are then none).
	User  string `json:"user,omitempty"`
	Model string `json:"model"`
	Key   string `json:"key"`
	// Verdict is one of the Key* verdicts; Why says it in a sentence.
	Verdict string `json:"verdict"`
	Why     string `json:"why"`
	// Scope is the scope covering Model ("" when unscoped).
	Scope string `json:"scope,omitempty"`
	// The record as it stands: its scope value, version, the seq of its
	// last write and whether that was a delete.
	ScopeValue string `json:"scope_value,omitempty"`
	Version    uint64 `json:"version,omitempty"`
	Seq        uint64 `json:"seq,omitempty"`
	Deleted    bool   `json:"deleted,omitempty"`
	// Grant is what grants ScopeValue to the device, when something does.
	Grant *GrantSource `json:"grant,omitempty"`
	// Connected is true when the device has a session on this node;
	// TokenGrants are then its token's grants. A device not connected here
	// has unknown token grants (the server keeps none of its tokens'
	// claims).
	Connected   bool               `json:"connected"`
	TokenGrants syncproto.ScopeSet `json:"token_grants,omitempty"`
	// MemberGrants are the user's membership grants of Scope now.
	MemberGrants []string `json:"member_grants,omitempty"`
	// Requested is the device's request the answer judges with (nil:
	// unknown), from RequestedFrom.
	Requested syncproto.ScopeSet `json:"requested,omitempty"`
	// RequestedFrom is RequestedWant (ParamWant was given) or
	// RequestedRecorded (the set recorded at the device's last subscribe
	// with scopes, on any node), "" when neither is known.
	RequestedFrom string `json:"requested_from,omitempty"`
	// RequestedAt is when the recorded set last changed (RequestedFrom
	// RequestedRecorded only).
	RequestedAt *time.Time `json:"requested_at,omitempty"`
	// Events are the key's scope history and the user's grant changes of
	// the values it held, oldest first, from the oplog entries scanned
	// (after ScannedFrom up to Head).
	Events      []KeyEvent `json:"events"`
	ScannedFrom uint64     `json:"scanned_from"`
	Head        uint64     `json:"head"`
	// Evicted, when the key is not on the device's scopes, says when and
	// why it left them, from Events ("" when the history scanned does not
	// tell).
	Evicted string `json:"evicted,omitempty"`
}

// The sources of KeyExplanation.Requested.
const (
	RequestedWant     = "want"
	RequestedRecorded = "recorded"
)

// GrantSource is what grants a scope value: the token (Kind "token") or a
// membership row (Kind "membership", with the row).
type GrantSource struct {
	Kind string     `json:"kind"`
	Row  *MemberRow `json:"row,omitempty"`
}

// The kinds of KeyEvent.
const (
	// EventWritten: the key was written (put) in a value (To) it was
	// already in or had no record before (From "").
	EventWritten = "written"
	// EventMoved: a put moved the key from value From to To.
	EventMoved = "moved"
	// EventDeleted: the key was deleted (it keeps its value).
	EventDeleted = "deleted"
	// EventGranted, EventRevoked: the user gained or lost value To
	// through the membership row Model/Key.
	EventGranted = "granted"
	EventRevoked = "revoked"
)

// KeyEvent is one event of a key's scope history.
type KeyEvent struct {
	Seq  uint64    `json:"seq"`
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	From string    `json:"from,omitempty"`
	To   string    `json:"to,omitempty"`
	// Model and Key name the membership row of a grant event; ClientID
	// the device that wrote the entry.
	Model    string `json:"model,omitempty"`
	Key      string `json:"key,omitempty"`
	ClientID string `json:"client_id,omitempty"`
}
