package auth

import (
	"slices"
	"time"
)

// Wildcard in a model list grants every model.
const Wildcard = "*"

// Principal is the identity a token carries and what it may do: a tenant, a
// user, a client id, the models it may read and write, and scope grants.
type Principal struct {
	TokenID string `json:"id"`
	Tenant  string `json:"tenant,omitempty"`
	// User names the person or service behind the token. A JWT principal
	// always has one (its sub); a token-file token may name one.
	User     string   `json:"user,omitempty"`
	ClientID string   `json:"client_id,omitempty"`
	Read     []string `json:"read,omitempty"`
	Write    []string `json:"write,omitempty"`
	// Scopes are grants by scope name (a scope name to the values it may
	// see), kept for partial sync; nothing enforces them yet.
	Scopes map[string][]string `json:"scopes,omitempty"`
	// Admin tokens authorise the admin API only; they carry no tenant.
	Admin bool `json:"admin,omitempty"`

	// ClientIDPrefix, set when ClientID is empty, is the namespace the
	// device's hello client id must start with (DeviceNamespace of User):
	// a JWT principal whose provider issues no client id claim.
	ClientIDPrefix string `json:"-"`
	// JTI is a JWT's id, "" for token-file tokens and JWTs without one.
	JTI string `json:"-"`
	// IssuedAt and ExpiresAt are a JWT's iat and exp; zero for token-file
	// tokens, which do not expire.
	IssuedAt  time.Time `json:"-"`
	ExpiresAt time.Time `json:"-"`
}

// CanRead reports whether the principal may read model.
func (p Principal) CanRead(model string) bool { return grants(p.Read, model) }

// CanWrite reports whether the principal may write model.
func (p Principal) CanWrite(model string) bool { return grants(p.Write, model) }

// IsJWT reports whether the principal came from a verified JWT.
func (p Principal) IsJWT() bool { return !p.ExpiresAt.IsZero() }

func grants(models []string, model string) bool {
	return slices.Contains(models, Wildcard) || slices.Contains(models, model)
}
