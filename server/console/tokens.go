package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/syncd-dev/syncd/adminapi"
)

// tokens: one page of the token file's tokens (PageSize, after ?after=),
// with the form that issues one.
func (c *Console) tokens(w http.ResponseWriter, r *http.Request, id identity) error {
	after, q := afterPage(r)
	var tp adminapi.TokensPage
	if _, err := c.call(r, id, http.MethodGet, adminapi.PathTokens, q, &tp); err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "tokens", view{Title: "Tokens", Flash: c.flashOf(r, id), Data: struct {
		Page  adminapi.TokensPage
		After string
	}{tp, after}}, id)
	return nil
}

// afterPage is the ?after= of a page keyed by name, and the admin API
// query of the PageSize rows after it.
func afterPage(r *http.Request) (string, url.Values) {
	after := r.URL.Query().Get("after")
	q := url.Values{adminapi.ParamLimit: {strconv.Itoa(PageSize)}}
	if after != "" {
		q.Set(adminapi.ParamAfter, after)
	}
	return after, q
}

// flashOf is the message a page shows after an action: from the session
// in a browser (once); from ?done= only for a bearer-header client (a
// script), so a link cannot put words on an operator's page.
func (c *Console) flashOf(r *http.Request, id identity) string {
	if id.sess != nil {
		return c.sessions.takeFlash(id.sess)
	}
	return r.URL.Query().Get("done")
}

// afterAction sends the browser back to page with done as its message.
func (c *Console) afterAction(w http.ResponseWriter, r *http.Request, id identity, page, done string) {
	if id.sess != nil {
		c.sessions.setFlash(id.sess, done)
		http.Redirect(w, r, Path+page, http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, Path+page+"?done="+url.QueryEscape(done), http.StatusSeeOther)
}

// models reads a form's comma-separated model list.
func models(v string) []string {
	var out []string
	for m := range strings.SplitSeq(v, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// issueToken issues a token through the admin API and answers the page
// that shows it: the only time it is shown (the page is not cached and
// nothing keeps the token; reloading the tokens page shows its id only).
func (c *Console) issueToken(w http.ResponseWriter, r *http.Request, id identity) {
	req := adminapi.TokenRequest{Admin: r.PostFormValue("admin") == "1"}
	if !req.Admin {
		req.Tenant = strings.TrimSpace(r.PostFormValue("tenant"))
		req.User = strings.TrimSpace(r.PostFormValue("user"))
		req.ClientID = strings.TrimSpace(r.PostFormValue("client_id"))
		req.Read, req.Write = models(r.PostFormValue("read")), models(r.PostFormValue("write"))
	}
	var issued adminapi.IssuedToken
	if _, err := c.callWith(r, id, http.MethodPost, adminapi.PathTokens, nil, req, &issued, http.StatusCreated); err != nil {
		c.fail(w, r, id, err)
		return
	}
	c.cfg.Logger.Info("console: token issued", "token_id", issued.Token.ID, "admin", issued.Token.Admin, "tenant", issued.Token.Tenant, "client_id", issued.Token.ClientID, "remote", r.RemoteAddr)
	c.render(w, r, http.StatusOK, "issued", view{Title: "Token issued", Nav: "tokens", Data: issued}, id)
}

// confirmRevoke asks the operator to confirm a revocation, naming the
// token and its open sessions.
func (c *Console) confirmRevoke(w http.ResponseWriter, r *http.Request, id identity) error {
	tokenID := r.URL.Query().Get("id")
	if tokenID == "" {
		return &apiError{Status: http.StatusBadRequest, Message: "which token? (?id=)"}
	}
	var tp adminapi.TokensPage
	if _, err := c.call(r, id, http.MethodGet, adminapi.PathTokens, url.Values{adminapi.ParamTokenID: {tokenID}}, &tp); err != nil {
		return err
	}
	if len(tp.Tokens) == 0 || tp.Tokens[0].ID != tokenID {
		return &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("no token %s in the token file", tokenID)}
	}
	c.render(w, r, http.StatusOK, "revoke", view{Title: "Revoke a token", Nav: "tokens", Data: tp.Tokens[0]}, id)
	return nil
}

// revokeToken revokes a token through the admin API; its open sessions
// end before the answer.
func (c *Console) revokeToken(w http.ResponseWriter, r *http.Request, id identity) {
	tokenID := r.PostFormValue("token_id")
	var ans adminapi.TokenRevoked
	if _, err := c.call(r, id, http.MethodDelete, adminapi.PathTokens, url.Values{adminapi.ParamTokenID: {tokenID}}, &ans); err != nil {
		c.fail(w, r, id, err)
		return
	}
	c.cfg.Logger.Info("console: token revoked", "token_id", ans.TokenID, "closed_sessions", ans.ClosedSessions, "remote", r.RemoteAddr)
	c.afterAction(w, r, id, "tokens", fmt.Sprintf("revoked %s: %d session(s) closed", ans.TokenID, ans.ClosedSessions))
}
