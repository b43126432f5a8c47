package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncproto"
)

// denyVersion is the deny-list file format this package reads and writes.
const denyVersion = 1

// maxJTIBytes bounds a jti on the deny list.
const maxJTIBytes = 256

// DenyList is the JWT deny list file: tokens refused although their
// signature and claims are good, in the admin API's shape (adminapi.DenyList:
// the file is what GET /v1/admin/deny answers, plus its version). Sessions
// holding a denied token are closed (unauthorized, 1008) the way revoked
// token-file tokens' are.
type DenyList struct {
	Version int `json:"version"`
	// Generation grows by one with every change this package writes (Deny,
	// Allow, and so the admin API and syncctl jwt revoke/allow), so cluster
	// nodes that read copies of the file can tell which is newer
	// (Generation reads it from the file's bytes). A file written before
	// generations has none: 0. Readers of the release before it ignore it.
	Generation uint64 `json:"generation,omitempty"`
	adminapi.DenyList
}

// DeniedJTI refuses the JWT whose jti is JTI until ExpiresAt (its exp):
// past it the entry is pruned, the token being refused anyway.
type DeniedJTI = adminapi.DeniedJTI

// DeniedUser refuses every JWT of User issued (iat) at or before RevokedAt,
// and any of the user's JWTs without iat, until Until. Tokens the provider
// issues later are accepted: whether the user may sign in again is the
// provider's decision.
type DeniedUser = adminapi.DeniedUser

// Denial is one change to the deny list: exactly one of JTI (a single
// token) and User (every token of the user issued up to RevokedAt, or up
// to the change), in force until Until (zero: until it is removed).
// ValidateDenial checks it.
type Denial = adminapi.Denial

// ErrInvalidDenial says a Denial (or an Allow) did not name exactly one
// valid jti or user: nothing was changed.
var ErrInvalidDenial = errors.New("invalid denial")

// ValidateDenial reports whether d names exactly one valid jti or user;
// its error wraps ErrInvalidDenial.
func ValidateDenial(d Denial) error {
	var err error
	switch {
	case (d.JTI == "") == (d.User == ""):
		err = errors.New("name exactly one of a jti and a user")
	case d.JTI != "" && !d.RevokedAt.IsZero():
		err = errors.New("revoked_at dates a user's denial, not a jti's")
	case d.JTI != "":
		err = validateJTI(d.JTI)
	default:
		err = syncproto.ValidateUser(d.User)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidDenial, err)
	}
	return nil
}

// denies reports why p is on the list at now, or "".
func (d *DenyList) denies(p Principal, now time.Time) string {
	if !p.IsJWT() {
		return ""
	}
	if p.JTI != "" && slices.ContainsFunc(d.JTIs, func(e DeniedJTI) bool { return e.JTI == p.JTI }) {
		return "the token (jti " + p.JTI + ") was revoked"
	}
	for _, u := range d.Users {
		if u.User == p.User && !lapsed(u.Until, now) && (p.IssuedAt.IsZero() || !p.IssuedAt.After(u.RevokedAt)) {
			return "the user's tokens issued before " + u.RevokedAt.UTC().Format(time.RFC3339) + " were revoked"
		}
	}
	return ""
}

// lapsed reports whether an entry in force until until is over at now.
func lapsed(until, now time.Time) bool { return !until.IsZero() && until.Before(now) }

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
// pruning entries that lapsed before now. expiresAt is the token's exp
// when known (zero keeps the entry until removed).
func DenyJTI(path, jti string, expiresAt, now time.Time) error {
	_, err := Deny(path, Denial{JTI: jti, Until: expiresAt}, now)
	return err
}

// DenyUser refuses every token of user issued at or before now, on the
// deny list at path (creating it), until the entry is removed.
func DenyUser(path, user string, now time.Time) error {
	_, err := Deny(path, Denial{User: user}, now)
	return err
}

// Deny applies d to the deny list at path (creating it) with an atomic
// replace, pruning entries that lapsed before now, and returns the list
// as written. A jti already denied keeps its entry (with the later
// Until); a user denied again is denied up to d.RevokedAt, or now when
// zero. A RevokedAt more than adminapi.MaxRevokedAtAhead after now is
// refused.
func Deny(path string, d Denial, now time.Time) (DenyList, error) {
	if err := ValidateDenial(d); err != nil {
		return DenyList{}, fmt.Errorf("deny: %w", err)
	}
	revokedAt := now
	if !d.RevokedAt.IsZero() {
		if d.RevokedAt.After(now.Add(adminapi.MaxRevokedAtAhead)) {
			return DenyList{}, fmt.Errorf("deny: %w: revoked_at %s is more than %s after this node's clock (%s)",
				ErrInvalidDenial, d.RevokedAt.UTC().Format(time.RFC3339Nano), adminapi.MaxRevokedAtAhead, now.UTC().Format(time.RFC3339Nano))
		}
		revokedAt = d.RevokedAt
	}
	return updateDenyList(path, now, func(l *DenyList) bool {
		if d.JTI != "" {
			i := slices.IndexFunc(l.JTIs, func(e DeniedJTI) bool { return e.JTI == d.JTI })
			if i < 0 {
				l.JTIs = append(l.JTIs, DeniedJTI{JTI: d.JTI, ExpiresAt: d.Until.UTC()})
			} else if e := &l.JTIs[i]; !e.ExpiresAt.IsZero() && (d.Until.IsZero() || d.Until.After(e.ExpiresAt)) {
				e.ExpiresAt = d.Until.UTC()
			}
			return true
		}
		l.Users = slices.DeleteFunc(l.Users, func(u DeniedUser) bool { return u.User == d.User })
		l.Users = append(l.Users, DeniedUser{User: d.User, RevokedAt: revokedAt.UTC(), Until: d.Until.UTC()})
		return true
	})
}

// ErrNotDenied says an Allow named a jti or user the deny list does not
// hold: nothing was changed.
var ErrNotDenied = errors.New("not on the deny list")

// Allow removes the deny-list entry of jti or of user (exactly one) from
// the list at path and returns the list as written, or ErrNotDenied.
func Allow(path, jti, user string, now time.Time) (DenyList, error) {
	if err := ValidateDenial(Denial{JTI: jti, User: user}); err != nil {
		return DenyList{}, fmt.Errorf("allow: %w", err)
	}
	return updateDenyList(path, now, func(l *DenyList) bool {
		nj, nu := len(l.JTIs), len(l.Users)
		l.JTIs = slices.DeleteFunc(l.JTIs, func(e DeniedJTI) bool { return jti != "" && e.JTI == jti })
		l.Users = slices.DeleteFunc(l.Users, func(u DeniedUser) bool { return user != "" && u.User == user })
		return len(l.JTIs) != nj || len(l.Users) != nu
	})
}

// updateDenyList reads the list at path, prunes lapsed entries, applies
// change and writes the list back atomically at the next generation; a
// change that reports false writes nothing and is ErrNotDenied.
func updateDenyList(path string, now time.Time, change func(*DenyList) bool) (DenyList, error) {
	d, err := ReadDenyList(path)
	if err != nil {
		return DenyList{}, err
	}
	d.JTIs = slices.DeleteFunc(d.JTIs, func(e DeniedJTI) bool { return lapsed(e.ExpiresAt, now) })
	d.Users = slices.DeleteFunc(d.Users, func(u DeniedUser) bool { return lapsed(u.Until, now) })
	if !change(&d) {
		return DenyList{}, ErrNotDenied
	}
	if d.JTIs == nil {
		d.JTIs = []DeniedJTI{}
	}
	if d.Users == nil {
		d.Users = []DeniedUser{}
	}
	next, err := nextGeneration(path, d.Generation)
	if err != nil {
		return DenyList{}, fmt.Errorf("write deny list: %w", err)
	}
	d.Generation = next
	if err := writeJSONFile(path, d); err != nil {
		return DenyList{}, fmt.Errorf("write deny list: %w", err)
	}
	return d, nil
}
