package server

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// recordScopeReads reads grants and backfill pages from the records by
// scanning the covered models of the tenant in one read transaction each
// (replication.Records.Snapshot), computing each row's scope value and
// member from its value with the declarations. A page costs a scan of the
// scope's rows in the tenant up to the page's end.
type recordScopeReads struct {
	records *replication.Records
	scopes  *replication.Scopes
}

// errPageFull stops a scan once a page holds one row past its end.
var errPageFull = errors.New("page full")

func (r recordScopeReads) grants(ctx context.Context, tenant, user string) (syncproto.ScopeSet, error) {
	out := syncproto.ScopeSet{}
	for _, name := range r.scopes.Names() {
		d := r.scopes.Named(name)
		if d.Membership == nil {
			continue
		}
		_, err := r.records.Snapshot(ctx, replication.Scope{Tenant: tenant, Models: []string{d.Membership.Model}}, func(_ uint64, rec replication.Record) error {
			if rec.Deleted || d.MemberOf(rec.Model, rec.Value) != user {
				return nil
			}
			if v, err := d.ValueOf(rec.Model, rec.Value); err == nil {
				out[name] = append(out[name], v)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	out.Normalize()
	return out, nil
}

func (r recordScopeReads) page(ctx context.Context, tenant, user string, d *replication.ScopeDecl, value, after string, maxRows, maxBytes int) (scopePage, error) {
	models := make([]string, 0, len(d.Fields))
	for m := range d.Fields {
		models = append(models, m)
	}
	slices.Sort(models)
	afterModel, afterKey, _ := strings.Cut(after, "/")
	var p scopePage
	size := 0
	head, err := r.records.Snapshot(ctx, replication.Scope{Tenant: tenant, Models: models}, func(at uint64, rec replication.Record) error {
		p.at = at
		if rec.Deleted || (after != "" && (rec.Model < afterModel || rec.Model == afterModel && rec.Key <= afterKey)) {
			return nil
		}
		if v, err := d.ValueOf(rec.Model, rec.Value); err != nil || v != value {
			return nil
		}
		if len(p.records) >= maxRows || len(p.records) > 0 && size+len(rec.Value) > maxBytes {
			return errPageFull
		}
		size += len(rec.Value)
		rec.ScopeValue = value
		p.records = append(p.records, rec)
		return nil
	})
	switch {
	case errors.Is(err, errPageFull):
	case err != nil:
		return scopePage{}, err
	default:
		p.done = true
	}
	p.at = max(p.at, head) // Snapshot returns no head with errPageFull
	if user != "" {
		held, err := r.grants(ctx, tenant, user)
		if err != nil {
			return scopePage{}, err
		}
		p.member = held.Has(d.Name, value)
	}
	if n := len(p.records); n > 0 {
		p.last = scopePosition(p.records[n-1].Model, p.records[n-1].Key)
	}
	return p, nil
}
