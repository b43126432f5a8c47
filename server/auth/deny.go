package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// denyVersion is the deny-list file format this package reads and writes.
const denyVersion = 1

// maxJTIBytes bounds a jti on the deny list.
const maxJTIBytes = 256

// DenyList is the JWT deny list: tokens refused although their signature
// and claims are good. Sessions holding a denied token are closed
// (unauthorized, 1008) the way revoked token-file tokens' are.
type DenyList struct {
	Version int `json:"version"`
	// JTIs are single tokens, by jti.
	JTIs []DeniedJTI `json:"jtis"`
	// Users are every token of a user issued at or before a time.
	Users []DeniedUser `json:"users"`
}

// DeniedJTI refuses the JWT whose jti is JTI. ExpiresAt, when set, is the
// token's exp: past it the entry is pruned, the token being refused anyway.
type DeniedJTI struct {
	JTI       string    `json:"jti"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// DeniedUser refuses every JWT of User issued (iat) at or before
// RevokedAt, and any of the user's JWTs without iat. Tokens the provider
// issues later are accepted: whether the user may sign in again is the
// provider's decision.
type DeniedUser struct {
	User      string    `json:"user"`
	RevokedAt time.Time `json:"revoked_at"`
}

// denies reports why p is on the list, or "".
func (d *DenyList) denies(p Principal) string {
	if !p.IsJWT() {
		return ""
	}
	if p.JTI != "" && slices.ContainsFunc(d.JTIs, func(e DeniedJTI) bool { return e.JTI == p.JTI }) {
		return "the token (jti " + p.JTI + ") was revoked"
	}
	for _, u := range d.Users {
		if u.User == p.User && (p.IssuedAt.IsZero() || !p.IssuedAt.After(u.RevokedAt)) {
			return "the user's tokens issued before " + u.RevokedAt.UTC().Format(time.RFC3339) + " were revoked"
		}
	}
	return ""
}

// ReadDenyList loads and validates the deny list at path. A missing file
// is an empty list.
func ReadDenyList(path string) (DenyList, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return DenyList{Version: denyVersion}, nil
	}
	if err != nil {
		return DenyList{}, fmt.Errorf("read deny list: %w", err)
	}
	var d DenyList
	if err := json.Unmarshal(b, &d); err != nil {
		return DenyList{}, fmt.Errorf("read deny list %s: not a deny list: %w", path, err)
	}
	if d.Version != denyVersion {
		return DenyList{}, fmt.Errorf("read deny list %s: version %d, want %d", path, d.Version, denyVersion)
	}
	for _, e := range d.JTIs {
		if err := validateJTI(e.JTI); err != nil {
			return DenyList{}, fmt.Errorf("read deny list %s: %w", path, err)
		}
	}
	for _, u := range d.Users {
		if err := syncproto.ValidateUser(u.User); err != nil {
			return DenyList{}, fmt.Errorf("read deny list %s: %w", path, err)
		}
	}
	return d, nil
}

func validateJTI(jti string) error {
	if jti == "" || len(jti) > maxJTIBytes {
		return fmt.Errorf("jti %q must be 1 to %d bytes", jti, maxJTIBytes)
	}
	return nil
}

// DenyJTI adds the token jti to the deny list at path (creating it),
// pruning entries whose token expired before now. expiresAt is the
// token's exp when known (zero keeps the entry until removed by hand).
func DenyJTI(path, jti string, expiresAt, now time.Time) error {
	if err := validateJTI(jti); err != nil {
		return fmt.Errorf("deny jti: %w", err)
	}
	return updateDenyList(path, now, func(d *DenyList) {
		if !slices.ContainsFunc(d.JTIs, func(e DeniedJTI) bool { return e.JTI == jti }) {
			d.JTIs = append(d.JTIs, DeniedJTI{JTI: jti, ExpiresAt: expiresAt.UTC()})
		}
	})
}

// DenyUser refuses every token of user issued at or before now, on the
// deny list at path (creating it).
func DenyUser(path, user string, now time.Time) error {
	if err := syncproto.ValidateUser(user); err != nil {
		return fmt.Errorf("deny user: %w", err)
	}
	return updateDenyList(path, now, func(d *DenyList) {
		d.Users = slices.DeleteFunc(d.Users, func(u DeniedUser) bool { return u.User == user })
		d.Users = append(d.Users, DeniedUser{User: user, RevokedAt: now.UTC()})
	})
}

func updateDenyList(path string, now time.Time, change func(*DenyList)) error {
	d, err := ReadDenyList(path)
	if err != nil {
		return err
	}
	d.JTIs = slices.DeleteFunc(d.JTIs, func(e DeniedJTI) bool { return !e.ExpiresAt.IsZero() && e.ExpiresAt.Before(now) })
	change(&d)
	if d.JTIs == nil {
		d.JTIs = []DeniedJTI{}
	}
	if d.Users == nil {
		d.Users = []DeniedUser{}
	}
	if err := writeJSONFile(path, d); err != nil {
		return fmt.Errorf("write deny list: %w", err)
	}
	return nil
}
