package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/server/auth"
)

// maxDenialBytes bounds the body of a POST of adminapi.PathDeny.
const maxDenialBytes = 4 << 10

func (s *Server) adminDenyList(*http.Request) (any, int, error) {
	d, err := s.cfg.Authenticator.DenyList()
	if err != nil {
		return nil, denyStatus(err), err
	}
	return d.DenyList, 0, nil
}

// adminDeny puts a denial in force and closes the open sessions it denies
// before answering: a device holding a denied token can neither write nor
// read from the answer on.
func (s *Server) adminDeny(r *http.Request) (any, int, error) {
	var d adminapi.Denial
	dec := json.NewDecoder(io.LimitReader(r.Body, maxDenialBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("want a JSON denial {\"jti\"|\"user\", \"until\"} of at most %d bytes: %w", maxDenialBytes, err)
	}
	list, err := s.cfg.Authenticator.Deny(d)
	if err != nil {
		return nil, denyStatus(err), err
	}
	closed := s.closeDeniedSessions(r.Context())
	s.log.Info("JWT deny list changed through the admin API", "jti", d.JTI, "user", d.User, "until", d.Until, "closed_sessions", closed)
	return adminapi.DenyChange{List: list.DenyList, ClosedSessions: closed}, 0, nil
}

func (s *Server) adminAllow(r *http.Request) (any, int, error) {
	q := r.URL.Query()
	list, err := s.cfg.Authenticator.Allow(q.Get(adminapi.ParamJTI), q.Get(adminapi.ParamUser))
	if err != nil {
		return nil, denyStatus(err), err
	}
	s.log.Info("JWT deny-list entry removed through the admin API", "jti", q.Get(adminapi.ParamJTI), "user", q.Get(adminapi.ParamUser))
	return adminapi.DenyChange{List: list.DenyList}, 0, nil
}

// closeDeniedSessions ends every open session whose token no longer holds
// (unauthorized or token_expired, close 1008, as the periodic recheck
// would) and waits for the closes; it returns how many it ended.
func (s *Server) closeDeniedSessions(ctx context.Context) int {
	var wg sync.WaitGroup
	n := 0
	for _, ss := range s.sessionList() {
		err := s.cfg.Authenticator.Check(ss.principal())
		if err == nil {
			continue
		}
		n++
		wg.Go(func() {
			ss.log.Info("token denied; closing its session", "token_id", ss.principal().TokenID, "err", err)
			ss.closeWith(ctx, authError(err))
		})
	}
	wg.Wait()
	return n
}

// denyStatus is the admin API status of a deny-list failure.
func denyStatus(err error) int {
	switch {
	case errors.Is(err, auth.ErrNoDenyFile):
		return http.StatusConflict
	case errors.Is(err, auth.ErrNotDenied):
		return http.StatusNotFound
	case errors.Is(err, auth.ErrInvalidDenial):
		return http.StatusBadRequest
	}
	return 0
}
