package server

import (
	"context"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// WorkTurnsHeld is how many work turns are held now (0 without a gate).
func (s *Server) WorkTurnsHeld() int {
	if s.work == nil {
		return 0
	}
	s.work.mu.Lock()
	defer s.work.mu.Unlock()
	return s.work.running
}

// OutboxFull reports whether a session of clientID has its answer lane
// full: its reader's next answer waits for the writer.
func (s *Server) OutboxFull(clientID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ss := range s.sessions {
		if ss.principal().ClientID == clientID && len(ss.outbox) == cap(ss.outbox) {
			return true
		}
	}
	return false
}

// HoldWorkTurns takes every work turn of the server's gate, as tenant,
// and returns what gives them back: sessions then park for their turns.
func (s *Server) HoldWorkTurns(tenant string) (giveBack func()) {
	for range s.work.max {
		if err := s.work.take(context.Background(), tenant); err != nil {
			panic(err)
		}
	}
	return func() {
		for range s.work.max {
			s.work.give()
		}
	}
}

// CommitAs commits muts as a device clientID of tenant, past every
// session (no work turn), and waits for the commit.
func (s *Server) CommitAs(ctx context.Context, tenant, clientID string, muts []syncproto.Mutation) error {
	p := auth.Principal{TokenID: clientID, Tenant: tenant, ClientID: clientID, Read: []string{"*"}, Write: []string{"*"}}
	req, err := s.push(ctx, p, muts, map[string]bool{})
	if err != nil {
		return err
	}
	select {
	case <-req.done:
		return req.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
