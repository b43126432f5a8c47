package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/server/auth"
)

// jwtRevokedView is the --json output of syncctl jwt revoke and allow.
type jwtRevokedView struct {
	JTI   string    `json:"jti,omitempty"`
	User  string    `json:"user,omitempty"`
	Until time.Time `json:"until,omitzero"`
	// File is the deny list written, when syncctl wrote it; Server the
	// admin API that did, with the sessions it closed.
	File           string `json:"deny_file,omitempty"`
	Server         string `json:"server,omitempty"`
	ClosedSessions int    `json:"closed_sessions"`
}

// denyTarget is where the jwt deny-list commands act: the admin API of
// one syncd or of several nodes (--server, or SYNCCTL_SERVER, a
// comma-separated list, and no --deny-file), which puts a change in force
// at once, or the deny-list file, which syncd re-reads within a second.
type denyTarget struct {
	file    string
	clients []*adminClient
}

func addDenyFlags(cmd *cobra.Command) *adminFlags {
	cmd.Flags().String("deny-file", defaultDenyFile, "syncd's JWT deny list, written directly when no --server is given (env SYNCCTL_JWT_DENY_FILE)")
	return addAdminFlags(cmd)
}

func (a *app) denyTarget(cmd *cobra.Command, o *adminFlags) (denyTarget, error) {
	f := cmd.Flags()
	viaAPI := f.Changed("server") || (a.getenv("SYNCCTL_SERVER") != "" && !f.Changed("deny-file"))
	if !viaAPI {
		return denyTarget{file: a.setting(f, "deny-file", "SYNCCTL_JWT_DENY_FILE")}, nil
	}
	if f.Changed("deny-file") {
		return denyTarget{}, failf(exitUsage, "give --server (the admin API writes syncd's deny list) or --deny-file (syncctl writes it), not both")
	}
	var t denyTarget
	for base := range strings.SplitSeq(a.setting(f, "server", "SYNCCTL_SERVER"), ",") {
		c, err := a.adminClientAt(cmd, o, strings.TrimSpace(base))
		if err != nil {
			return denyTarget{}, err
		}
		t.clients = append(t.clients, c)
	}
	return t, nil
}

// changeDenyList makes one change of the deny list: through the admin API
// of each server in turn (method on PathDeny with query and body) or,
// without one, by file on the deny-list file; it prints v (its Server and
// ClosedSessions, or its File, filled in) as JSON or as text says, a line
// for each server that made the change. An entry the list does not hold
// is the not-found status either way. A server that fails does not stop
// the others; the error names every one that failed.
func (a *app) changeDenyList(ctx context.Context, t denyTarget, verb, method string, query url.Values, body any,
	file func(path string) (auth.DenyList, error), v jwtRevokedView, text func(jwtRevokedView) string) error {
	if len(t.clients) == 0 {
		if _, err := file(t.file); err != nil {
			return denyFileError(verb, err)
		}
		v.File = t.file
		return a.printDenyChange(v, text)
	}
	var failed []string
	code := exitFailure
	for _, c := range t.clients {
		var ans adminapi.DenyChange
		err := c.do(ctx, method, adminapi.PathDeny, query, body, &ans)
		if err != nil {
			if r, ok := errors.AsType[*refusal](err); ok && r.status == http.StatusNotFound {
				err = failf(exitNotFound, "%s: %s", verb, r.msg)
			}
			if len(t.clients) == 1 {
				return err
			}
			if len(failed) == 0 {
				code = ExitCode(err)
			}
			failed = append(failed, c.base+": "+err.Error())
			continue
		}
		v.Server, v.ClosedSessions = c.base, ans.ClosedSessions
		if err := a.printDenyChange(v, text); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return failf(code, "%s failed on %d of %d servers (the others made the change): %s", verb, len(failed), len(t.clients), strings.Join(failed, "; "))
	}
	return nil
}

func (a *app) printDenyChange(v jwtRevokedView, text func(jwtRevokedView) string) error {
	if a.json {
		return printJSON(a.stdout, v)
	}
	_, err := fmt.Fprintln(a.stdout, text(v))
	return err
}

// jtiOrUser adds the flags naming one deny-list entry.
func jtiOrUser(cmd *cobra.Command, verb string) (jti, user *string) {
	jti = cmd.Flags().String("jti", "", "the token id to "+verb)
	user = cmd.Flags().String("user", "", "the user whose tokens to "+verb)
	cmd.MarkFlagsOneRequired("jti", "user")
	cmd.MarkFlagsMutuallyExclusive("jti", "user")
	return jti, user
}

func (a *app) jwtRevokeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revoke (--jti ID | --user USER) [--until TIME] [--server URL[,URL...] | --deny-file FILE]",
		Short: "Deny a JWT by jti, or every JWT a user holds now; syncd closes their sessions",
		Long: `Add an entry to syncd's JWT deny list. --jti denies one token; --user denies
every token of the user issued up to now: tokens the identity provider issues
later are accepted, so also block the user there if they must not sign in
again. --until (RFC 3339) ends the entry: for a jti give the token's exp, for
a user the latest exp of the tokens denied; without it the entry stays until
syncctl jwt allow removes it.

With --server (or SYNCCTL_SERVER) syncd's admin API writes its deny list
(--jwt-deny-file) and closes the sessions of the denied tokens before it
answers (unauthorized, close 1008). Otherwise syncctl writes the file itself
(--deny-file): syncd re-reads it within a second and closes the sessions
within about two.

Every change bumps the list's generation. On a cluster whose nodes read their
own copies, give every node's admin API in one --server list
(--server https://n1:8081,https://n2:8081,https://n3:8081): syncctl dates the
denial once and each node writes the same entry, in force on each at once. Or
change the list in one place and copy the whole file to every other node
within syncd --cluster-tokens-grace, or write the one file every node shares.
Do not revoke a user through each node's API in separate commands: each is
dated by its own clock, and the lists then differ at the same generation
(docs/operations.md, Tokens on a cluster).`,
		Args: exactArgs(0, "no arguments"),
	}
	o := addDenyFlags(cmd)
	jti, user := jtiOrUser(cmd, "deny")
	until := cmd.Flags().String("until", "", "when the entry ends (RFC 3339); default: when it is removed")
	cmd.Flags().String("expires", "", "the former name of --until")
	cmd.Flags().MarkDeprecated("expires", "use --until")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if cmd.Flags().Changed("expires") {
			*until = cmd.Flags().Lookup("expires").Value.String()
		}
		var end time.Time
		if *until != "" {
			var err error
			if end, err = time.Parse(time.RFC3339, *until); err != nil {
				return failf(exitUsage, "jwt revoke: --until (or --expires): %v", err)
			}
		}
		t, err := a.denyTarget(cmd, o)
		if err != nil {
			return err
		}
		// Given several servers, a user's denial is dated once, here, so
		// that each writes the same entry; one server dates it itself.
		now := a.now()
		d := auth.Denial{JTI: *jti, User: *user, Until: end}
		if *user != "" && len(t.clients) > 1 {
			d.RevokedAt = now
		}
		return a.changeDenyList(cmd.Context(), t, "jwt revoke", http.MethodPost, nil, d,
			func(path string) (auth.DenyList, error) { return auth.Deny(path, d, now) },
			jwtRevokedView{JTI: *jti, User: *user, Until: end},
			func(v jwtRevokedView) string {
				what := "token " + *jti
				if *user != "" {
					what = "every token of user " + *user + " issued until now"
				}
				if !end.IsZero() {
					what += " until " + stamp(end)
				}
				if v.File != "" {
					return fmt.Sprintf("denied %s in %s; syncd refuses it within a second", what, v.File)
				}
				return fmt.Sprintf("denied %s; syncd closed %s", what, count(v.ClosedSessions, "session", "sessions"))
			})
	}
	return cmd
}

func (a *app) jwtAllowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "allow (--jti ID | --user USER) [--server URL[,URL...] | --deny-file FILE]",
		Short: "Remove a jti or a user from syncd's JWT deny list",
		Long: `Remove the deny-list entry of a jti or a user (syncctl jwt revoke made it):
syncd accepts the tokens again at once (--server) or within a second (the
file). A name the list does not hold exits with the not-found status.`,
		Args: exactArgs(0, "no arguments"),
	}
	o := addDenyFlags(cmd)
	jti, user := jtiOrUser(cmd, "accept again")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		t, err := a.denyTarget(cmd, o)
		if err != nil {
			return err
		}
		q := url.Values{adminapi.ParamJTI: {*jti}}
		if *user != "" {
			q = url.Values{adminapi.ParamUser: {*user}}
		}
		return a.changeDenyList(cmd.Context(), t, "jwt allow", http.MethodDelete, q, nil,
			func(path string) (auth.DenyList, error) { return auth.Allow(path, *jti, *user, a.now()) },
			jwtRevokedView{JTI: *jti, User: *user},
			func(jwtRevokedView) string {
				if *user != "" {
					return "user " + *user + " is no longer denied"
				}
				return "token " + *jti + " is no longer denied"
			})
	}
	return cmd
}

func (a *app) jwtDeniedCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "denied [--server URL | --deny-file FILE]",
		Short: "List syncd's JWT deny list",
		Args:  exactArgs(0, "no arguments"),
	}
	o := addDenyFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		t, err := a.denyTarget(cmd, o)
		if err != nil {
			return err
		}
		var list adminapi.DenyList
		switch len(t.clients) {
		case 0:
			d, err := auth.ReadDenyList(t.file)
			if err != nil {
				return failf(exitBadFile, "jwt denied: %v", err)
			}
			list = d.DenyList
		case 1:
			if err := t.clients[0].get(cmd.Context(), adminapi.PathDeny, nil, &list); err != nil {
				return err
			}
		default:
			return failf(exitUsage, "jwt denied lists one node's deny list: give one --server")
		}
		if a.json {
			return printJSON(a.stdout, list)
		}
		tb := newTable(a.stdout, "KIND", "JTI OR USER", "ISSUED UP TO", "UNTIL")
		for _, e := range list.JTIs {
			tb.row("jti", e.JTI, "-", untilText(e.ExpiresAt))
		}
		for _, u := range list.Users {
			tb.row("user", u.User, stamp(u.RevokedAt), untilText(u.Until))
		}
		if err := tb.flush(); err != nil {
			return err
		}
		_, err = fmt.Fprintln(a.stdout, strconv.Itoa(len(list.JTIs)+len(list.Users))+" denied")
		return err
	}
	return cmd
}

// denyFileError is a failed change of the deny-list file, with its exit
// status: usage for a bad jti or user, not found for an entry the list
// does not hold.
func denyFileError(verb string, err error) error {
	code := exitFailure
	switch {
	case errors.Is(err, auth.ErrNotDenied):
		code = exitNotFound
	case errors.Is(err, auth.ErrInvalidDenial):
		code = exitUsage
	}
	return failf(code, "%s: %v", verb, err)
}

func untilText(t time.Time) string {
	if t.IsZero() {
		return "removed by hand"
	}
	return stamp(t)
}
