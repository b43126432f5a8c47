package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// defaultAdminURL is syncd's default admin listener (syncd --admin-listen).
const defaultAdminURL = "http://127.0.0.1:8081"

// adminFlags are the flags of every command that calls the admin API.
type adminFlags struct {
	server  string
	token   string
	timeout time.Duration
	ca      string
}

func addAdminFlags(cmd *cobra.Command) *adminFlags {
	o := &adminFlags{}
	f := cmd.Flags()
	f.StringVar(&o.server, "server", defaultAdminURL, "syncd admin API base URL (env SYNCCTL_SERVER)")
	f.StringVar(&o.token, "token", "", "admin bearer token (env SYNCCTL_TOKEN; prefer the environment, flags show in ps)")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "bound on each request to the server")
	f.StringVar(&o.ca, "ca", "", "PEM file of the CA that signed the admin listener's certificate, for an https --server with a private CA (env SYNCCTL_CA)")
	return o
}

// adminClient calls syncd's admin API with an admin token. Its errors carry
// exit statuses: unreachable, token refused, not found.
type adminClient struct {
	base  string
	token string
	http  *http.Client
}

// adminClient resolves the admin flags (flag, then environment, then
// default) into a client.
func (a *app) adminClient(cmd *cobra.Command, o *adminFlags) (*adminClient, error) {
	return a.adminClientAt(cmd, o, a.setting(cmd.Flags(), "server", "SYNCCTL_SERVER"))
}

// adminClientAt is adminClient for the admin API at base.
func (a *app) adminClientAt(cmd *cobra.Command, o *adminFlags, base string) (*adminClient, error) {
	base = strings.TrimRight(base, "/")
	token := a.setting(cmd.Flags(), "token", "SYNCCTL_TOKEN")
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, failf(exitUsage, "--server %q: want the admin API's base URL, like %s", base, defaultAdminURL)
	}
	if token == "" {
		return nil, failf(exitUsage, "an admin token is required: set SYNCCTL_TOKEN or pass --token (syncctl token issue --admin makes one)")
	}
	hc := &http.Client{Timeout: o.timeout}
	if ca := a.setting(cmd.Flags(), "ca", "SYNCCTL_CA"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, failf(exitUsage, "--ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, failf(exitUsage, "--ca %s holds no PEM certificate", ca)
		}
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	return &adminClient{base: base, token: token, http: hc}, nil
}

// adminAnswerLimit bounds an error body read from the server.
const adminAnswerLimit = 64 << 10

// get fetches path?query and decodes the JSON answer into out. Statuses in
// answers (besides 200) carry an answer too, like the ledger's 404.
func (c *adminClient) get(ctx context.Context, path string, query url.Values, out any, answers ...int) error {
	return c.do(ctx, http.MethodGet, path, query, nil, out, answers...)
}

// do sends method to path?query with send (JSON-encoded unless nil) and
// decodes the JSON answer into out, as get does.
func (c *adminClient) do(ctx context.Context, method, path string, query url.Values, send, out any, answers ...int) error {
	target := c.base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var rd io.Reader
	if send != nil {
		b, err := json.Marshal(send)
		if err != nil {
			return failf(exitFailure, "request %s: %v", target, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return failf(exitUsage, "request %s: %v", target, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if send != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return failf(exitUnreachable, "syncd admin API at %s is unreachable: %v", c.base, err)
	}
	defer resp.Body.Close()
	isJSON := strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json")
	if isJSON && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return failf(exitFailure, "%s answered %s with something that is not the admin API's JSON: %v", c.base, path, err)
		}
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, adminAnswerLimit))
	var e struct {
		Error string `json:"error"`
		Type  string `json:"type"` // "error" in a sync-protocol refusal: not the admin API
	}
	json.Unmarshal(body, &e)
	if isJSON && e.Type == "" && slices.Contains(answers, resp.StatusCode) {
		if err := json.Unmarshal(body, out); err != nil {
			return failf(exitFailure, "%s answered %s with something that is not the admin API's JSON: %v", c.base, path, err)
		}
		return nil
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return failf(exitUnauthorized, "syncd at %s refused the admin token (wrong, revoked, or not an admin token)", c.base)
	case e.Error != "":
		code := exitFailure
		if resp.StatusCode == http.StatusBadRequest {
			code = exitUsage
		}
		return &cliError{code: code, err: &refusal{path: path, status: resp.StatusCode, msg: e.Error}}
	case resp.StatusCode == http.StatusNotFound:
		return failf(exitUnreachable, "no syncd admin API at %s (%s for %s): --server must name the admin listener (syncd --admin-listen)", c.base, resp.Status, path)
	}
	return failf(exitFailure, "syncd answered %s with %s: %s", path, resp.Status, oneLine(string(body)))
}

// refusal is the admin API's error answer to one request.
type refusal struct {
	path   string
	status int
	msg    string
}

func (r *refusal) Error() string {
	return fmt.Sprintf("syncd refused %s (%d %s): %s", r.path, r.status, http.StatusText(r.status), r.msg)
}
