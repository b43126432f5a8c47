package server

import (
	"net/http"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// scopeOf is what a principal may read: its tenant, and its readable models.
func scopeOf(p auth.Principal) replication.Scope {
	if p.CanRead(auth.Wildcard) {
		return replication.Scope{Tenant: p.Tenant, AllModels: true}
	}
	return replication.Scope{Tenant: p.Tenant, Models: p.Read}
}

// serveSnapshot streams the principal's readable records as of one oplog
// head (PROTOCOL.md, "Snapshot"), for a client that must resync. Deleted
// records are left out: the snapshot is what a fresh replica starts from.
// A body that ends without its trailer was cut short and must be discarded.
func (s *Server) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	p, ok := s.principal(w, r, false)
	if !ok {
		return
	}
	var sw *syncproto.SnapshotWriter
	start := func(head uint64) error {
		w.Header().Set("Content-Type", syncproto.SnapshotContentType)
		var err error
		sw, err = syncproto.NewSnapshotWriter(w, head)
		return err
	}
	head, err := s.store.Records.Snapshot(r.Context(), scopeOf(p), func(head uint64, rec replication.Record) error {
		if sw == nil {
			if err := start(head); err != nil {
				return err
			}
		}
		if rec.Deleted {
			return nil
		}
		return sw.Write(syncproto.SnapshotRecord{Model: rec.Model, Key: rec.Key, Value: rec.Value, Version: rec.Version, HLC: rec.HLC})
	})
	if err == nil && sw == nil {
		err = start(head)
	}
	if err == nil {
		err = sw.Close()
	}
	if err != nil {
		s.log.Warn("snapshot cut short", "client_id", p.ClientID, "err", err)
		if sw == nil {
			httpError(w, http.StatusInternalServerError, syncproto.Errorf(syncproto.CodeInternal, "snapshot failed; retry later"))
		}
	}
}
