package main

import (
	"cmp"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncproto"
)

func (a *app) scopesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "scopes [--tenant T [--scope S] [--value V] [--user U]]",
		Short: "Show the declared scopes, a tenant's scope values with their grants and devices, and a user's grants",
		Long: `Show partial sync as the server sees it (PROTOCOL.md section 19).

Without --tenant: the declared scopes (name, models and their value fields,
membership model). With --tenant: also the tenant's scope values that have
live rows, each with its row count, the users granted it by membership rows
(MEMBERS), the devices whose requested set names it or "*" of its scope
(REQUESTING: recorded at each device's last subscribe with scopes, connected or
not, on any node of a cluster), and the devices connected to this node that
hold it by token or membership (CONNECTED). The server answers at most 1000
values a request; syncctl reads pages until --limit.

--value V lists the value's membership rows and devices; --user U adds what
the user holds: membership rows, what they grant, and the token grants of the
user's connected devices.`,
		Args: exactArgs(0, "no arguments"),
	}
	o := addAdminFlags(cmd)
	var tenant, scope, value, user, after string
	var limit int
	f := cmd.Flags()
	f.StringVar(&tenant, "tenant", "", "list the values and grants of this tenant")
	f.StringVar(&scope, "scope", "", "only this scope")
	f.StringVar(&value, "value", "", "only this value, with its members and devices (needs --scope when several scopes are declared)")
	f.StringVar(&user, "user", "", "also show this user's grants")
	f.StringVar(&after, "after", "", "start after this SCOPE:VALUE (a previous answer's next)")
	f.IntVar(&limit, "limit", adminapi.MaxScopeValuesPage, "list at most this many values; 0 for all")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if limit < 0 {
			return failf(exitUsage, "--limit must not be negative")
		}
		if tenant == "" && (scope != "" || value != "" || user != "" || after != "") {
			return failf(exitUsage, "--scope, --value, --user and --after need --tenant: scope values and grants are per tenant")
		}
		c, err := a.adminClient(cmd, o)
		if err != nil {
			return err
		}
		q := url.Values{}
		for k, v := range map[string]string{adminapi.ParamTenant: tenant, adminapi.ParamScope: scope, adminapi.ParamValue: value, adminapi.ParamUser: user} {
			if v != "" {
				q.Set(k, v)
			}
		}
		var out adminapi.ScopesPage
		for first := true; ; first = false {
			if after != "" {
				q.Set(adminapi.ParamAfter, after)
			}
			if limit > 0 {
				q.Set(adminapi.ParamLimit, strconv.Itoa(min(limit-len(out.Values), adminapi.MaxScopeValuesPage)))
			}
			var page adminapi.ScopesPage
			if err := c.get(cmd.Context(), adminapi.PathScopes, q, &page); err != nil {
				return err
			}
			if first {
				out = page
				q.Del(adminapi.ParamUser) // the user's grants come with the first page
			} else {
				out.Values, out.Next = append(out.Values, page.Values...), page.Next
			}
			if after = page.Next; after == "" || (limit > 0 && len(out.Values) >= limit) {
				break
			}
		}
		if a.json {
			return printJSON(a.stdout, out)
		}
		return a.printScopes(out, value != "")
	}
	return cmd
}

// printScopes prints a ScopesPage as tables; detail lists each value's
// members and devices.
func (a *app) printScopes(p adminapi.ScopesPage, detail bool) error {
	if len(p.Scopes) == 0 {
		_, err := fmt.Fprintln(a.stdout, "no scope is declared (syncd --scope): every device holds every row of the models its token may read")
		return err
	}
	t := newTable(a.stdout, "SCOPE", "MODELS", "MEMBERSHIP")
	for _, d := range p.Scopes {
		var models []string
		for _, m := range slices.Sorted(maps.Keys(d.Models)) {
			models = append(models, m+"."+d.Models[m])
		}
		membership := "-"
		if d.Membership != nil {
			membership = d.Membership.Model + ":" + d.Membership.UserField
		}
		t.row(d.Name, strings.Join(models, ","), membership)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if p.Tenant == "" {
		return nil
	}
	fmt.Fprintf(a.stdout, "\ntenant %s: %s\n", p.Tenant, count(len(p.Values), "value", "values"))
	t = newTable(a.stdout, "SCOPE", "VALUE", "ROWS", "MEMBERS", "REQUESTING", "CONNECTED")
	for _, v := range p.Values {
		t.row(v.Scope, v.Value, strconv.Itoa(v.Rows), strconv.Itoa(v.Members), strconv.Itoa(v.Requesting), strconv.Itoa(v.Devices))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if detail {
		for _, v := range p.Values {
			if err := a.printMemberRows(fmt.Sprintf("%s %q members", v.Scope, v.Value), v.MemberRows); err != nil {
				return err
			}
			if err := a.printDevices(fmt.Sprintf("%s %q devices connected here", v.Scope, v.Value), v.DeviceList); err != nil {
				return err
			}
		}
	}
	if p.Next != "" {
		fmt.Fprintf(a.stderr, "more values: --after %s (or raise --limit, 0 for all)\n", p.Next)
	}
	if u := p.User; u != nil {
		fmt.Fprintf(a.stdout, "\nuser %s holds by membership: %s\n", u.User, scopeSetText(u.Grants))
		if err := a.printMemberRows("membership rows", u.Membership); err != nil {
			return err
		}
		if u.Truncated {
			fmt.Fprintf(a.stderr, "user %s holds more than %d membership rows: the first are listed\n", u.User, adminapi.MaxScopeValueMembers)
		}
		return a.printDevices("devices connected here", u.Devices)
	}
	return nil
}

func (a *app) printMemberRows(title string, rows []adminapi.MemberRow) error {
	fmt.Fprintf(a.stdout, "\n%s: %d\n", title, len(rows))
	if len(rows) == 0 {
		return nil
	}
	t := newTable(a.stdout, "VALUE", "USER", "ROW", "SEQ")
	for _, m := range rows {
		t.row(m.Value, m.User, m.Model+"/"+m.Key, strconv.FormatUint(m.Seq, 10))
	}
	return t.flush()
}

func (a *app) printDevices(title string, devices []adminapi.Device) error {
	fmt.Fprintf(a.stdout, "\n%s: %d\n", title, len(devices))
	if len(devices) == 0 {
		return nil
	}
	t := newTable(a.stdout, "CLIENT", "USER", "TOKEN GRANTS")
	for _, d := range devices {
		t.row(d.ClientID, cmp.Or(d.User, "-"), scopeSetText(d.TokenGrants))
	}
	return t.flush()
}

// scopeSetText writes a ScopeSet as SCOPE=V1,V2 items, "-" when empty.
func scopeSetText(s syncproto.ScopeSet) string {
	if len(s) == 0 {
		return "-"
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(s)) {
		parts = append(parts, name+"="+strings.Join(s[name], ","))
	}
	return strings.Join(parts, " ")
}
