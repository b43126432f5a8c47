package auth

import "slices"

// Wildcard in a model list grants every model.
const Wildcard = "*"

// Principal is the identity a token carries and what it may do.
type Principal struct {
	TokenID  string   `json:"id"`
	Tenant   string   `json:"tenant,omitempty"`
	ClientID string   `json:"client_id,omitempty"`
	Read     []string `json:"read,omitempty"`
	Write    []string `json:"write,omitempty"`
	// Admin tokens authorise the admin API only; they carry no tenant.
	Admin bool `json:"admin,omitempty"`
}

// CanRead reports whether the principal may read model.
func (p Principal) CanRead(model string) bool { return grants(p.Read, model) }

// CanWrite reports whether the principal may write model.
func (p Principal) CanWrite(model string) bool { return grants(p.Write, model) }

func grants(models []string, model string) bool {
	return slices.Contains(models, Wildcard) || slices.Contains(models, model)
}
