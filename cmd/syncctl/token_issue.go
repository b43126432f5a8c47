package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// issuedView is the --json output of syncctl token issue.
type issuedView struct {
	tokenView
	// Token is the bearer token. It is shown only here.
	Token string `json:"token"`
	// Credential is the device credential of a client token: its client
	// id and token in the one string client.Config.Credential takes.
	Credential string `json:"credential,omitempty"`
}

func (a *app) tokenIssueCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "issue (--tenant T --client-id C [--user U] [--read M,...] [--write M,...] [--scope S=V,...] | --admin)",
		Short: "Add a token to the token file and print it (the only time it is shown)",
		Long: `Add a token and print it on stdout, so TOKEN=$(syncctl token issue ...) keeps
it. A client token acts as exactly one client id in one tenant and may read and
write the listed models ("*" for every model), and holds the scope values given
with --scope (PROTOCOL.md section 19; "S=*" for every value of scope S; users'
other values come from membership rows). An admin token authorises the admin
API only.

With --count N (client tokens only) it issues N tokens in one write of the
file, for client ids C-1 .. C-N, and prints one "CLIENT_ID TOKEN" line each:
the file syncctl bench --clients reads.

With --credential it prints the device credential instead of the bare token:
"sdc_<client id>@<token>", the one setting an app gives client.Config.Credential
(or examples/notes --credential, syncctl put --credential).`,
		Args: exactArgs(0, "no arguments"),
	}
	addTokenFileFlag(cmd)
	var p auth.Principal
	cmd.Flags().StringVar(&p.Tenant, "tenant", "", "the tenant the client belongs to")
	cmd.Flags().StringVar(&p.ClientID, "client-id", "", "the one client id the token may act as")
	cmd.Flags().StringVar(&p.User, "user", "", "the user the token acts for (shown in welcome, syncctl token ls); optional")
	cmd.Flags().StringSliceVar(&p.Read, "read", nil, `models the token may read, comma-separated ("*" for all)`)
	cmd.Flags().StringSliceVar(&p.Write, "write", nil, `models the token may write, comma-separated ("*" for all)`)
	cmd.Flags().BoolVar(&p.Admin, "admin", false, "an admin token (no tenant, client or models)")
	scopes := cmd.Flags().StringArray("scope", nil, `scope values the token grants, as SCOPE=V1,V2 ("SCOPE=*" for every value); repeatable`)
	credential := cmd.Flags().Bool("credential", false, "print the device credential (client id and token in one string) instead of the bare token")
	count := cmd.Flags().Int("count", 0, fmt.Sprintf("issue this many client tokens (1..%d), for client ids C-1 .. C-N", maxIssueCount))
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		path := a.tokenFile(cmd)
		grants, err := parseScopeGrants(*scopes)
		if err != nil {
			return failf(exitUsage, "token issue: %v", err)
		}
		p.Scopes = grants
		if err := p.Validate(); err != nil {
			return failf(exitUsage, "token issue: %v", err)
		}
		if _, err := readTokens(path); err != nil && ExitCode(err) != exitNotFound {
			return err
		}
		now := a.now().UTC()
		if *credential && p.Admin {
			return failf(exitUsage, "token issue: --credential is for client tokens, not --admin ones")
		}
		if cmd.Flags().Changed("count") {
			return a.issueMany(path, p, *count, now)
		}
		token, err := auth.Issue(path, p, now)
		if errors.Is(err, fs.ErrPermission) {
			return failf(exitFailure, "%v (run syncctl as the user syncd runs as)", err)
		}
		if err != nil {
			return failf(exitFailure, "%v", err)
		}
		p.TokenID = auth.TokenIDOf(token)
		view := issuedView{tokenView: tokenView{Principal: p, CreatedAt: now}, Token: token}
		if !p.Admin {
			view.Credential = client.FormatCredential(p.ClientID, token)
		}
		if a.json {
			return printJSON(a.stdout, view)
		}
		shown := token
		if *credential {
			shown = view.Credential
		}
		if _, err := fmt.Fprintln(a.stdout, shown); err != nil {
			return err
		}
		who := "an admin token"
		if !p.Admin {
			who = fmt.Sprintf("client %s in tenant %s", p.ClientID, p.Tenant)
		}
		fmt.Fprintf(a.stderr, "issued token %s for %s in %s; it is shown only this once\n", p.TokenID, who, path)
		return nil
	}
	return cmd
}

// maxIssueCount bounds token issue --count: the file is rewritten whole and
// read whole by syncd on every change.
const maxIssueCount = 100_000

// issueMany issues count client tokens like p, for client ids
// p.ClientID-1 .. p.ClientID-count, in one write of the token file.
func (a *app) issueMany(path string, p auth.Principal, count int, now time.Time) error {
	switch {
	case p.Admin:
		return failf(exitUsage, "token issue: --count issues client tokens, not --admin ones")
	case count < 1 || count > maxIssueCount:
		return failf(exitUsage, "token issue: --count %d outside 1..%d", count, maxIssueCount)
	}
	ps := make([]auth.Principal, count)
	for i := range ps {
		ps[i] = p
		ps[i].ClientID = fmt.Sprintf("%s-%d", p.ClientID, i+1)
	}
	if err := ps[count-1].Validate(); err != nil {
		return failf(exitUsage, "token issue: %v", err)
	}
	tokens, err := auth.IssueMany(path, ps, now)
	if errors.Is(err, fs.ErrPermission) {
		return failf(exitFailure, "%v (run syncctl as the user syncd runs as)", err)
	}
	if err != nil {
		return failf(exitFailure, "%v", err)
	}
	views := make([]issuedView, count)
	w := bufio.NewWriter(a.stdout)
	for i, token := range tokens {
		ps[i].TokenID = auth.TokenIDOf(token)
		views[i] = issuedView{tokenView: tokenView{Principal: ps[i], CreatedAt: now}, Token: token}
		if !a.json {
			fmt.Fprintf(w, "%s %s\n", ps[i].ClientID, token)
		}
	}
	if a.json {
		return printJSON(a.stdout, views)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "issued %d tokens for clients %s-1..%s-%d in tenant %s in %s; they are shown only this once\n",
		count, p.ClientID, p.ClientID, count, p.Tenant, path)
	return nil
}

// parseScopeGrants reads --scope SCOPE=V1,V2 flags into a token's grants.
func parseScopeGrants(specs []string) (map[string][]string, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	grants := syncproto.ScopeSet{}
	for _, spec := range specs {
		name, list, ok := strings.Cut(spec, "=")
		if !ok || list == "" {
			return nil, fmt.Errorf("--scope %q: want SCOPE=VALUE[,VALUE...]", spec)
		}
		grants[name] = append(grants[name], strings.Split(list, ",")...)
	}
	grants.Normalize()
	if err := grants.Validate("--scope", 0); err != nil {
		return nil, err
	}
	return grants, nil
}
