package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/server/auth"
)

// adminTokens answers one page of the token file's tokens, with the open
// sessions of each on this node.
func (s *Server) adminTokens(r *http.Request) (any, int, error) {
	q := r.URL.Query()
	limit, err := limitParam(q, adminapi.MaxTokensPage)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	tokens, err := s.cfg.Authenticator.Tokens()
	if err != nil {
		return nil, tokenStatus(err), err
	}
	if only := q.Get(adminapi.ParamTokenID); only != "" {
		tokens = slices.DeleteFunc(tokens, func(t auth.Token) bool { return t.TokenID != only })
	}
	after := q.Get(adminapi.ParamAfter)
	start, _ := slices.BinarySearchFunc(tokens, after, func(t auth.Token, id string) int { return strings.Compare(t.TokenID, id) })
	if start < len(tokens) && tokens[start].TokenID == after {
		start++
	}
	end := min(start+limit, len(tokens))
	sessions := map[string]int{}
	for _, ss := range s.sessionList() {
		sessions[ss.principal().TokenID]++
	}
	page := adminapi.TokensPage{Tokens: make([]adminapi.TokenInfo, 0, end-start), Total: len(tokens)}
	for _, t := range tokens[start:end] {
		info := tokenInfo(t)
		info.Sessions = sessions[t.TokenID]
		page.Tokens = append(page.Tokens, info)
	}
	if end < len(tokens) {
		page.Next = tokens[end-1].TokenID
	}
	return page, 0, nil
}

// limitParam reads ParamLimit: absent, 0 or above most, most.
func limitParam(q url.Values, most int) (int, error) {
	limit, err := uintParam(q.Get(adminapi.ParamLimit))
	if err != nil {
		return 0, err
	}
	if limit == 0 || limit > uint64(most) {
		return most, nil
	}
	return int(limit), nil
}

// adminIssueToken issues a token; the bearer token is in its answer only.
func (s *Server) adminIssueToken(r *http.Request) (any, int, error) {
	var req adminapi.TokenRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, adminapi.MaxTokenRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("want a JSON token request of at most %d bytes: %w", adminapi.MaxTokenRequestBytes, err)
	}
	p := auth.Principal{Admin: req.Admin, Tenant: req.Tenant, User: req.User, ClientID: req.ClientID, Read: req.Read, Write: req.Write, Scopes: req.Scopes}
	if err := p.Validate(); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("issue token: %w", err)
	}
	bearer, t, err := s.cfg.Authenticator.IssueToken(p)
	if err != nil {
		return nil, tokenStatus(err), err
	}
	s.metrics.adminTokenChanges.WithLabelValues("issued").Inc()
	s.log.Info("token issued through the admin API", "token_id", t.TokenID, "admin", p.Admin, "tenant", p.Tenant, "client_id", p.ClientID)
	return adminapi.IssuedToken{Token: tokenInfo(t), Bearer: bearer}, http.StatusCreated, nil
}

// adminRevokeToken revokes a token and ends its open sessions before
// answering: from the answer on, a device holding it can neither write
// nor read.
func (s *Server) adminRevokeToken(r *http.Request) (any, int, error) {
	id := r.URL.Query().Get(adminapi.ParamTokenID)
	if id == "" {
		return nil, http.StatusBadRequest, errors.New("token_id is required")
	}
	if err := s.cfg.Authenticator.RevokeToken(id); err != nil {
		return nil, tokenStatus(err), err
	}
	closed := s.closeDeniedSessions(r.Context())
	s.metrics.adminTokenChanges.WithLabelValues("revoked").Inc()
	s.log.Info("token revoked through the admin API", "token_id", id, "closed_sessions", closed)
	return adminapi.TokenRevoked{TokenID: id, ClosedSessions: closed}, 0, nil
}

func tokenInfo(t auth.Token) adminapi.TokenInfo {
	p := t.Principal
	return adminapi.TokenInfo{ID: p.TokenID, CreatedAt: t.CreatedAt, TokenRequest: adminapi.TokenRequest{Admin: p.Admin, Tenant: p.Tenant, User: p.User,
		ClientID: p.ClientID, Read: p.Read, Write: p.Write, Scopes: p.Scopes}}
}

// registerAdmin registers the admin API's own instruments.
func (m *metrics) registerAdmin(reg prometheus.Registerer) {
	m.adminTokenChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncd_admin_token_changes_total", Help: "Token-file tokens issued or revoked through the admin API or the console, by change (issued, revoked).",
	}, []string{"change"})
	for _, c := range []string{"issued", "revoked"} {
		m.adminTokenChanges.WithLabelValues(c)
	}
	reg.MustRegister(m.adminTokenChanges)
}

// tokenStatus is the admin API status of a token-file failure.
func tokenStatus(err error) int {
	switch {
	case errors.Is(err, auth.ErrNoTokenFile):
		return http.StatusConflict
	case errors.Is(err, auth.ErrNoSuchToken):
		return http.StatusNotFound
	}
	return 0
}
