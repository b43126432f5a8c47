package replication

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/syncd-dev/syncd/internal/jsonscan"
	"github.com/syncd-dev/syncd/syncproto"
)

// Scopes are the declared scopes of partial sync (PROTOCOL.md section 19):
// each a name, the models it covers and, per model, the top-level member
// of a record's value whose string is the record's scope value, and
// optionally a membership model whose rows grant scope values to users.
// The zero Scopes declares none. Every replica must hold the same
// declarations: scope values and grants are computed from them when a
// write is applied.
type Scopes struct {
	byName  map[string]*ScopeDecl
	byModel map[string]*ScopeDecl
}

// ScopeDecl is one declared scope.
type ScopeDecl struct {
	Name string
	// Fields maps each covered model to the member holding its scope value.
	Fields map[string]string
	// Membership, when set, names the model (covered by this scope) whose
	// rows grant their scope value to the user their UserField names.
	Membership *syncproto.Membership
}

// Set reads one --scope declaration, "NAME=MODEL.FIELD[,MODEL.FIELD...]",
// adding the models to scope NAME (declared by its first use).
func (s *Scopes) Set(spec string) error {
	name, list, ok := strings.Cut(spec, "=")
	if !ok || list == "" {
		return fmt.Errorf("scope %q: want NAME=MODEL.FIELD[,MODEL.FIELD...]", spec)
	}
	if err := syncproto.ValidateModel(name); err != nil {
		return fmt.Errorf("scope %q: the name must be a model name (%s)", spec, syncproto.ModelPattern)
	}
	d := s.decl(name)
	for _, item := range strings.Split(list, ",") {
		model, field, ok := strings.Cut(item, ".")
		if !ok || field == "" || len(field) > syncproto.MaxKeyBytes {
			return fmt.Errorf("scope %q: %q: want MODEL.FIELD (a top-level member of 1 to %d bytes)", spec, item, syncproto.MaxKeyBytes)
		}
		if err := syncproto.ValidateModel(model); err != nil {
			return fmt.Errorf("scope %q: %q: %v", spec, item, err)
		}
		if other, taken := s.byModel[model]; taken {
			return fmt.Errorf("scope %q: model %s is already covered by scope %s (a model belongs to at most one scope)", spec, model, other.Name)
		}
		d.Fields[model] = field
		s.byModel[model] = d
	}
	return nil
}

// SetMembership reads one --membership declaration, "NAME=MODEL:USERFIELD":
// rows of MODEL, which scope NAME must already cover, grant their scope
// value to the user named by their USERFIELD member.
func (s *Scopes) SetMembership(spec string) error {
	name, rest, ok := strings.Cut(spec, "=")
	model, field, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || field == "" || len(field) > syncproto.MaxKeyBytes {
		return fmt.Errorf("membership %q: want SCOPE=MODEL:USERFIELD", spec)
	}
	d, declared := s.byName[name]
	switch {
	case !declared:
		return fmt.Errorf("membership %q: scope %s is not declared (declare it with --scope first)", spec, name)
	case d.Membership != nil:
		return fmt.Errorf("membership %q: scope %s already has membership model %s", spec, name, d.Membership.Model)
	}
	if _, covered := d.Fields[model]; !covered {
		return fmt.Errorf("membership %q: scope %s does not cover model %s (a membership row needs a scope value)", spec, name, model)
	}
	if d.Fields[model] == field {
		return fmt.Errorf("membership %q: the user member must differ from the scope member %s", spec, field)
	}
	d.Membership = &syncproto.Membership{Model: model, UserField: field}
	return nil
}

func (s *Scopes) decl(name string) *ScopeDecl {
	if s.byName == nil {
		s.byName, s.byModel = map[string]*ScopeDecl{}, map[string]*ScopeDecl{}
	}
	d, ok := s.byName[name]
	if !ok {
		d = &ScopeDecl{Name: name, Fields: map[string]string{}}
		s.byName[name] = d
	}
	return d
}

// Empty reports whether no scope is declared.
func (s *Scopes) Empty() bool { return s == nil || len(s.byName) == 0 }

// Of returns the scope covering model, or nil.
func (s *Scopes) Of(model string) *ScopeDecl {
	if s == nil {
		return nil
	}
	return s.byModel[model]
}

// Named returns the scope called name, or nil.
func (s *Scopes) Named(name string) *ScopeDecl {
	if s == nil {
		return nil
	}
	return s.byName[name]
}

// Names returns the declared scope names, sorted.
func (s *Scopes) Names() []string {
	if s == nil {
		return nil
	}
	names := make([]string, 0, len(s.byName))
	for n := range s.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Info returns the declarations as welcome lists them, for the scopes
// covering a model visible reports true for.
func (s *Scopes) Info(visible func(model string) bool) map[string]syncproto.ScopeInfo {
	out := map[string]syncproto.ScopeInfo{}
	for name, d := range s.byName {
		info := syncproto.ScopeInfo{Models: map[string]string{}}
		for m, f := range d.Fields {
			if visible(m) {
				info.Models[m] = f
			}
		}
		if m := d.Membership; m != nil && visible(m.Model) {
			// A principal that may not see the membership model is told
			// only of the models it sees: welcome describes no model
			// outside them.
			info.Membership = m
		}
		if len(info.Models) > 0 {
			out[name] = info
		}
	}
	return out
}

// String returns the declarations as the flags that make them, sorted:
// what cluster nodes compare to agree.
func (s *Scopes) String() string {
	if s == nil {
		return ""
	}
	var parts []string
	for _, name := range s.Names() {
		d := s.byName[name]
		models := make([]string, 0, len(d.Fields))
		for m, f := range d.Fields {
			models = append(models, m+"."+f)
		}
		slices.Sort(models)
		parts = append(parts, "--scope "+name+"="+strings.Join(models, ","))
		if m := d.Membership; m != nil {
			parts = append(parts, "--membership "+name+"="+m.Model+":"+m.UserField)
		}
	}
	return strings.Join(parts, " ")
}

// ValueOf returns the scope value of a put of value to a model of d: the
// string in d's member for that model. The error (CodeInvalidScopeValue)
// says what is wrong: value is not an object, the member is absent or not
// a string, or the string is not a valid scope value.
func (d *ScopeDecl) ValueOf(model string, value []byte) (string, *syncproto.Error) {
	return stringMember(value, d.Fields[model], "scope "+d.Name)
}

// MemberOf returns the user a row of d's membership model grants to: its
// UserField member, "" when the row is not a membership row or names none
// validly (such a row grants nothing).
func (d *ScopeDecl) MemberOf(model string, value []byte) string {
	if d.Membership == nil || d.Membership.Model != model || value == nil {
		return ""
	}
	user, err := stringMember(value, d.Membership.UserField, "membership")
	if err != nil || syncproto.ValidateUser(user) != nil {
		return ""
	}
	return user
}

// stringMember returns the string in member field of the JSON object
// value, checked as a scope value. It scans the object's top level only
// (jsonscan), so a large value costs one pass and no allocation of its
// members. A key written with escapes is compared as written.
func stringMember(value []byte, field, what string) (string, *syncproto.Error) {
	var raw []byte
	i := jsonscan.SkipSpace(value, 0)
	_, ok := jsonscan.Object(value, i, func(key []byte, v int) (int, bool) {
		end, _, ok := jsonscan.ValueEnd(value, v)
		if ok && string(key) == field {
			raw = value[v:end]
		}
		return end, ok
	})
	if !ok {
		return "", syncproto.Errorf(syncproto.CodeInvalidScopeValue, "%s: the value must be a JSON object with a string member %q", what, field)
	}
	var v string
	if raw == nil || raw[0] != '"' || json.Unmarshal(raw, &v) != nil {
		return "", syncproto.Errorf(syncproto.CodeInvalidScopeValue, "%s: member %q must be present and a string", what, field)
	}
	if syncproto.ValidateScopeValue(v) != nil {
		return "", syncproto.Errorf(syncproto.CodeInvalidScopeValue, "%s: member %q must hold 1 to %d bytes of UTF-8 without control characters, not %q", what, field, syncproto.MaxScopeValueBytes, syncproto.AllValues)
	}
	return v, nil
}

// GrantChange is a change of one user's membership grant made by one
// write: the user holds Value of Scope through membership rows after the
// write (Held) or no longer does. Token grants are not counted: a reader
// combines both.
type GrantChange struct {
	User  string `json:"user"`
	Scope string `json:"scope"`
	Value string `json:"value"`
	Held  bool   `json:"held"`
}

// MemberKey names one user's hold on one scope value through membership
// rows.
type MemberKey struct{ Scope, Value, User string }

// memberSource reads what deciding writes of scoped models needs of the
// membership rows of one store.
type memberSource interface {
	// memberCounts counts the live rows of membership model in tenant by
	// (scope value, member), for the values and users given.
	memberCounts(ctx context.Context, tenant, model string, values, users []string) (map[[2]string]int, error)
	// founded reports which of values have a row (live or deleted) of
	// membership model in tenant.
	founded(ctx context.Context, tenant, model string, values []string) (map[string]bool, error)
}

// loadScopes fills v's scope fields for b, whose records v already holds:
// the declarations, and the membership rows of the scope values and users
// b's writes touch (the batch's user and the members its membership
// writes name, before and after).
func loadScopes(ctx context.Context, scopes *Scopes, v *View, b *Batch, src memberSource) error {
	if scopes == nil || scopes.Empty() {
		return nil
	}
	v.Scopes = scopes
	type touched struct{ values, users map[string]bool }
	byScope := map[*ScopeDecl]*touched{}
	for _, m := range b.admitted() {
		d := scopes.Of(m.Model)
		if d == nil || d.Membership == nil {
			continue
		}
		t := byScope[d]
		if t == nil {
			t = &touched{values: map[string]bool{}, users: map[string]bool{}}
			byScope[d] = t
		}
		if b.User != "" {
			t.users[b.User] = true
		}
		if rec, ok := v.Records[RecordKey{m.Model, m.Key}]; ok {
			if rec.ScopeValue != "" {
				t.values[rec.ScopeValue] = true
			}
			if rec.Member != "" {
				t.users[rec.Member] = true
			}
		}
		if m.Op == syncproto.OpPut {
			if value, err := d.ValueOf(m.Model, m.Value); err == nil {
				t.values[value] = true
			}
			if user := d.MemberOf(m.Model, m.Value); user != "" {
				t.users[user] = true
			}
		}
	}
	v.Members, v.Founded = map[MemberKey]int{}, map[[2]string]bool{}
	for d, t := range byScope {
		values, users := sortedKeys(t.values), sortedKeys(t.users)
		if len(values) == 0 {
			continue
		}
		if len(users) > 0 {
			counts, err := src.memberCounts(ctx, b.Tenant, d.Membership.Model, values, users)
			if err != nil {
				return fmt.Errorf("load batch: membership of scope %s: %w", d.Name, err)
			}
			for vu, n := range counts {
				v.Members[MemberKey{d.Name, vu[0], vu[1]}] = n
			}
		}
		founded, err := src.founded(ctx, b.Tenant, d.Membership.Model, values)
		if err != nil {
			return fmt.Errorf("load batch: membership of scope %s: %w", d.Name, err)
		}
		for value := range founded {
			v.Founded[[2]string{d.Name, value}] = true
		}
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// memberCounts implements memberSource over the records table.
func (r *Records) memberCounts(ctx context.Context, tx *sql.Tx, tenant, model string, values, users []string) (map[[2]string]int, error) {
	args := []any{tenant, model}
	for _, v := range values {
		args = append(args, v)
	}
	for _, u := range users {
		args = append(args, u)
	}
	rows, err := tx.QueryContext(ctx, `SELECT scope_value, member, count(*) FROM records
		WHERE tenant = ? AND model = ? AND deleted = 0
		AND scope_value IN (?`+strings.Repeat(",?", len(values)-1)+`)
		AND member IN (?`+strings.Repeat(",?", len(users)-1)+`)
		GROUP BY scope_value, member`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[[2]string]int{}
	for rows.Next() {
		var value, user string
		var n int
		if err := rows.Scan(&value, &user, &n); err != nil {
			return nil, err
		}
		out[[2]string{value, user}] = n
	}
	return out, rows.Err()
}

// founded implements memberSource over the records table.
func (r *Records) founded(ctx context.Context, tx *sql.Tx, tenant, model string, values []string) (map[string]bool, error) {
	args := []any{tenant, model}
	for _, v := range values {
		args = append(args, v)
	}
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT scope_value FROM records
		WHERE tenant = ? AND model = ? AND scope_value IN (?`+strings.Repeat(",?", len(values)-1)+`)`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var value string
		if err := rows.Scan(&value); err != nil {
			return nil, err
		}
		out[value] = true
	}
	return out, rows.Err()
}

// txMembers is a memberSource reading through one transaction.
type txMembers struct {
	r  *Records
	tx *sql.Tx
}

func (s txMembers) memberCounts(ctx context.Context, tenant, model string, values, users []string) (map[[2]string]int, error) {
	return s.r.memberCounts(ctx, s.tx, tenant, model, values, users)
}

func (s txMembers) founded(ctx context.Context, tenant, model string, values []string) (map[string]bool, error) {
	return s.r.founded(ctx, s.tx, tenant, model, values)
}

// GrantsAt returns the scope values user holds in tenant through live rows
// of membership models (Grants), and the seq of the last write applied to
// the records they were read from: the grants are those at that seq.
func (r *Records) GrantsAt(ctx context.Context, tenant, user string, scopes *Scopes) (syncproto.ScopeSet, uint64, error) {
	out := syncproto.ScopeSet{}
	if user == "" || scopes == nil {
		return out, 0, nil
	}
	var at uint64
	err := readTx(ctx, r.db, func(conn *sql.Conn) error {
		if err := conn.QueryRowContext(ctx, `SELECT applied_seq FROM records_state WHERE id = 1`).Scan(&at); err != nil {
			return err
		}
		rows, err := conn.QueryContext(ctx, `SELECT model, scope_value FROM records
			WHERE tenant = ? AND member = ? AND deleted = 0 AND scope_value IS NOT NULL`, tenant, user)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var model, value string
			if err := rows.Scan(&model, &value); err != nil {
				return err
			}
			if d := scopes.Of(model); d != nil && d.Membership != nil && d.Membership.Model == model {
				out[d.Name] = append(out[d.Name], value)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, 0, fmt.Errorf("grants of %s: %w", user, err)
	}
	out.Normalize()
	return out, at, nil
}

// membershipModels returns the declared membership models, sorted.
func (s *Scopes) membershipModels() []string {
	var models []string
	for _, name := range s.Names() {
		if m := s.byName[name].Membership; m != nil {
			models = append(models, m.Model)
		}
	}
	return models
}

// RewindGrants returns the membership grants user held in tenant at seq
// cursor, given held, those it held at seq at (GrantsAt), by undoing the
// grant changes of the writes in (cursor, at] that feed holds. A reader
// that walks the log from cursor must start from these, not from held:
// the walk meets each of those changes at its seq, and an entry is
// readable by the grants at its own seq only (PROTOCOL.md 19.1). A cursor
// the feed no longer holds yields its *CursorError.
func RewindGrants(ctx context.Context, feed Feed, scopes *Scopes, tenant, user string, held syncproto.ScopeSet, cursor, at uint64) (syncproto.ScopeSet, error) {
	models := scopes.membershipModels()
	if cursor >= at || user == "" || len(models) == 0 {
		return held, nil
	}
	// The first change of a value in the window says what it was before:
	// a value gained there was not held at cursor, a value lost was.
	first := map[[2]string]bool{}
	var order [][2]string
	req := ReadRequest{After: cursor, Limit: MaxReadLimit,
		Scope: Scope{Tenant: tenant, Models: models, Follow: syncproto.ScopeSet{}, Scopes: scopes, User: user}}
	for req.After < at {
		page, err := feed.Read(ctx, req)
		if err != nil {
			return nil, err
		}
		if page.Next <= req.After || (len(page.Grants) > 0 && page.Next > at) {
			break
		}
		for _, g := range page.Grants {
			k := [2]string{g.Scope, g.Value}
			if _, seen := first[k]; !seen {
				first[k] = g.Held
				order = append(order, k)
			}
		}
		req.After = page.Next
	}
	out := cloneScopeSet(held)
	for _, k := range order {
		if first[k] {
			out[k[0]] = slices.DeleteFunc(out[k[0]], func(v string) bool { return v == k[1] })
		} else if !out.Has(k[0], k[1]) {
			out[k[0]] = append(out[k[0]], k[1])
		}
	}
	for name, values := range out {
		if len(values) == 0 {
			delete(out, name)
		}
	}
	out.Normalize()
	return out, nil
}
