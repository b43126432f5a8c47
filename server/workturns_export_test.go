package server

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
