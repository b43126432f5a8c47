package syncproto

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Scopes (partial sync, PROTOCOL.md section 19). A scope is a name, the
// models it covers and, per model, the top-level member of a record's
// value whose string is the record's scope value. A device receives the
// records of a covered model only for the scope values it holds: granted
// to its principal (by its token or by rows of the scope's membership
// model) and requested in its subscription.

// AllValues, as the only value of a scope in a ScopeSet, stands for every
// value: in a grant (from a token, never from a membership row), every
// value of the scope; in a request, every value granted now or later.
const AllValues = "*"

// MaxScopeValueBytes bounds one scope value.
const MaxScopeValueBytes = 256

// DefaultMaxScopeValues is the default bound on the scope values one
// subscription follows (Limits.MaxScopeValues), counted over the
// subscription's own request after AllValues is expanded to the values
// granted.
const DefaultMaxScopeValues = 1000

// Eviction reasons: why rows leave a device.
const (
	// EvictMoved: the row's scope value changed to one the device does not
	// hold (an entry with op evict).
	EvictMoved = "moved"
	// EvictRevoked: the device's principal lost the value's grant.
	EvictRevoked = "revoked"
	// EvictUnsubscribed: the device no longer requests the value.
	EvictUnsubscribed = "unsubscribed"
	// EvictNotGranted: the device requested or held a value its principal
	// was never granted (or no longer is, when the server cannot tell).
	EvictNotGranted = "not_granted"
)

// ResyncScopesChanged is Resync.Reason when what a subscription without a
// scopes member may see changed through a grant or a moved row: such a
// client cannot apply evictions, so it reloads from a snapshot.
const ResyncScopesChanged = "scopes_changed"

// ScopeInfo describes one declared scope, as welcome lists it.
type ScopeInfo struct {
	// Models maps each covered model to the top-level member of its
	// values that holds the scope value.
	Models map[string]string `json:"models"`
	// Membership, optional, names the model whose rows grant values of
	// this scope to users.
	Membership *Membership `json:"membership,omitempty"`
}

// Membership describes a scope's membership model: a row of Model (which
// the scope covers) grants its scope value to the user named by the row's
// UserField member.
type Membership struct {
	Model     string `json:"model"`
	UserField string `json:"user_field"`
}

// ScopeSet is a set of scope values by scope name: grants, requests, the
// values a device holds. Values are kept sorted and unique by Normalize.
type ScopeSet map[string][]string

// Has reports whether s holds value of scope, directly or through
// AllValues.
func (s ScopeSet) Has(scope, value string) bool {
	values := s[scope]
	if len(values) == 1 && values[0] == AllValues {
		return true
	}
	_, ok := slices.BinarySearch(values, value)
	return ok
}

// All reports whether s holds every value of scope (AllValues).
func (s ScopeSet) All(scope string) bool {
	values := s[scope]
	return len(values) == 1 && values[0] == AllValues
}

// Count returns the number of values in s, AllValues counting as one.
func (s ScopeSet) Count() int {
	n := 0
	for _, values := range s {
		n += len(values)
	}
	return n
}

// Normalize sorts each scope's values and drops duplicates, in place.
func (s ScopeSet) Normalize() {
	for name, values := range s {
		slices.Sort(values)
		s[name] = slices.Compact(values)
	}
}

// Validate checks s: scope names as model names, at most max values in
// all (0: no bound), each value valid (ValidateScopeValue), AllValues only
// alone. field names the member in errors. The error is an *Error with
// CodeInvalidScope, or CodeTooManyScopeValues for the count.
func (s ScopeSet) Validate(field string, max int) error {
	if max > 0 && s.Count() > max {
		return Errorf(CodeTooManyScopeValues, "%s holds %d scope values, more than %d", field, s.Count(), max)
	}
	for name, values := range s {
		if !isLowerName(name, 63) {
			return Errorf(CodeInvalidScope, "%s: scope name %q must match %s", field, truncate(name), ModelPattern)
		}
		for _, v := range values {
			if v == AllValues {
				if len(values) != 1 {
					return Errorf(CodeInvalidScope, "%s: scope %q: %q must be the scope's only value", field, name, AllValues)
				}
				continue
			}
			if err := ValidateScopeValue(v); err != nil {
				return prefixed(err, "%s: scope %q", field, name)
			}
		}
	}
	return nil
}

// ValidateScopeValue reports whether v is a valid scope value: 1 to
// MaxScopeValueBytes bytes of UTF-8 without control characters, not
// AllValues. The error is an *Error with CodeInvalidScopeValue.
func ValidateScopeValue(v string) error {
	if v == "" || v == AllValues || len(v) > MaxScopeValueBytes || !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl) {
		return Errorf(CodeInvalidScopeValue, "scope value %q must be 1 to %d bytes of UTF-8 without control characters, not %q", truncate(v), MaxScopeValueBytes, AllValues)
	}
	return nil
}

// Eviction tells a device to drop every row of a scope value it holds
// (changes.evictions). It applies after the entries of the page that
// carries it.
type Eviction struct {
	Scope string `json:"scope"`
	Value string `json:"value"`
	// Reason is EvictRevoked, EvictUnsubscribed or EvictNotGranted.
	Reason string `json:"reason"`
}

// Validate checks an eviction's members.
func (e *Eviction) Validate() error {
	if !isLowerName(e.Scope, 63) {
		return Errorf(CodeBadRequest, "eviction scope %q must match %s", truncate(e.Scope), ModelPattern)
	}
	if err := ValidateScopeValue(e.Value); err != nil {
		return prefixed(err, "eviction")
	}
	switch e.Reason {
	case EvictRevoked, EvictUnsubscribed, EvictNotGranted:
		return nil
	}
	return Errorf(CodeBadRequest, "eviction reason %q is not revoked, unsubscribed or not_granted", truncate(e.Reason))
}

// Backfill is one page of the records of a scope value a subscription
// added (server to client): the value's live rows, in key order, read at
// seq At. The device applies each entry unless it holds the key at the
// same or a newer version, and never moves its cursor for a backfill. Done
// marks the value's last page: the device then holds the value complete.
type Backfill struct {
	// ID is the subscribe request's id.
	ID    string `json:"id"`
	Scope string `json:"scope"`
	Value string `json:"value"`
	// Entries are put entries (seq is the record's last write, op put,
	// scope_value set), in increasing key order within a model.
	Entries []Change `json:"entries"`
	// At is the oplog seq the page was read at.
	At uint64 `json:"at"`
	// LastKey is the model and key of the page's last entry, "model/key"
	// encoded as a ScopeResume position: a subscribe that resumes the
	// value on another connection sends it back.
	LastKey string `json:"last_key,omitempty"`
	// Done is true on the value's last page.
	Done bool `json:"done"`
}

// Validate checks backfill: answer id, scope and value, at most
// MaxPullLimit valid put entries of that value, and at.
func (m *Backfill) Validate() error {
	if err := validateRequestID(m.ID); err != nil {
		return err
	}
	if !isLowerName(m.Scope, 63) {
		return Errorf(CodeBadRequest, "backfill scope %q must match %s", truncate(m.Scope), ModelPattern)
	}
	if err := ValidateScopeValue(m.Value); err != nil {
		return prefixed(err, "backfill")
	}
	if len(m.Entries) > MaxPullLimit {
		return Errorf(CodeBadRequest, "backfill holds %d entries, more than %d", len(m.Entries), MaxPullLimit)
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		if err := e.Validate(); err != nil {
			return prefixed(err, "entries[%d]", i)
		}
		if e.Op != OpPut || e.ScopeValue != m.Value {
			return Errorf(CodeBadRequest, "entries[%d]: a backfill entry is a put of scope value %q", i, truncate(m.Value))
		}
	}
	if len(m.LastKey) > MaxMessageBytes {
		return Errorf(CodeBadRequest, "last_key holds more than %d bytes", MaxMessageBytes)
	}
	return validateSeq("at", m.At)
}

func (*Backfill) Type() Type          { return TypeBackfill }
func (m *Backfill) RequestID() string { return m.ID }
func (*Backfill) message()            {}

// validate checks one declared scope as welcome lists it.
func (s ScopeInfo) validate(name string) error {
	if !isLowerName(name, 63) {
		return Errorf(CodeBadRequest, "scopes: scope name %q must match %s", truncate(name), ModelPattern)
	}
	if len(s.Models) == 0 {
		return Errorf(CodeBadRequest, "scopes: scope %q covers no model", name)
	}
	for model, field := range s.Models {
		if err := ValidateModel(model); err != nil {
			return prefixed(err, "scopes: scope %q", name)
		}
		if field == "" || len(field) > MaxKeyBytes {
			return Errorf(CodeBadRequest, "scopes: scope %q model %q: field must hold 1..%d bytes", name, model, MaxKeyBytes)
		}
	}
	if m := s.Membership; m != nil {
		if _, ok := s.Models[m.Model]; !ok {
			return Errorf(CodeBadRequest, "scopes: scope %q: membership model %q is not one the scope covers", name, truncate(m.Model))
		}
		if m.UserField == "" || len(m.UserField) > MaxKeyBytes {
			return Errorf(CodeBadRequest, "scopes: scope %q: membership user_field must hold 1..%d bytes", name, MaxKeyBytes)
		}
	}
	return nil
}
