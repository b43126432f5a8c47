package main

import (
	"cmp"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/client"
)

// keyFlags are explain's flags for one key of one device.
type keyFlags struct {
	client, model, key, user string
	want                     []string
}

func addKeyFlags(cmd *cobra.Command) *keyFlags {
	k := &keyFlags{}
	f := cmd.Flags()
	f.StringVar(&k.client, "client", "", "explain a key for this device (client id); needs --model and --key")
	f.StringVar(&k.model, "model", "", "the key's model (with --client)")
	f.StringVar(&k.key, "key", "", "the key (with --client)")
	f.StringVar(&k.user, "user", "", "the device's user, when neither its session nor its client id names it (with --client)")
	f.StringArrayVar(&k.want, "want", nil, `judge with these requested scope values, SCOPE=V1,V2 ("SCOPE=*": every value granted), instead of the set the server recorded; repeatable (with --client)`)
	return k
}

// set reports whether explain was asked about a key.
func (k *keyFlags) set() bool {
	return k.client != "" || k.model != "" || k.key != "" || k.user != "" || len(k.want) > 0
}

// explainKey asks the server whether a key is on a device's scopes, and
// prints its answer.
func (a *app) explainKey(cmd *cobra.Command, o *adminFlags, k *keyFlags, args []string, tenant, replica string) error {
	switch {
	case len(args) > 0:
		return failf(exitUsage, "explain --client takes no queue FILE (got %q): it asks the server about a key", args[0])
	case k.client == "" || k.model == "" || k.key == "":
		return failf(exitUsage, "explain a key with all of --client, --model and --key")
	}
	if tenant == "" && replica != "" {
		s, err := client.ReadSignIn(cmd.Context(), replica)
		if err != nil {
			return failf(exitBadFile, "--replica %s: %v", replica, unwrapAll(err))
		}
		tenant = s.Tenant
	}
	if tenant == "" {
		return failf(exitUsage, "explain --client needs --tenant (or --replica FILE of a device that connected)")
	}
	q := url.Values{adminapi.ParamTenant: {tenant}, adminapi.ParamClientID: {k.client}, adminapi.ParamModel: {k.model}, adminapi.ParamKey: {k.key}}
	if k.user != "" {
		q.Set(adminapi.ParamUser, k.user)
	}
	for _, spec := range k.want {
		name, list, ok := strings.Cut(spec, "=")
		if !ok || name == "" || list == "" {
			return failf(exitUsage, "--want %q: want SCOPE=VALUE[,VALUE...]", spec)
		}
		for _, v := range strings.Split(list, ",") {
			q.Add(adminapi.ParamWant, name+":"+v)
		}
	}
	c, err := a.adminClient(cmd, o)
	if err != nil {
		return err
	}
	var ans adminapi.KeyExplanation
	if err := c.get(cmd.Context(), adminapi.PathScopesExplain, q, &ans); err != nil {
		return err
	}
	if a.json {
		return printJSON(a.stdout, ans)
	}
	return a.printKeyExplanation(ans)
}

func (a *app) printKeyExplanation(e adminapi.KeyExplanation) error {
	w := a.stdout
	fmt.Fprintf(w, "%s/%s for device %s (user %s) in tenant %s: %s\n", e.Model, e.Key, e.ClientID, cmp.Or(e.User, "unknown"), e.Tenant, e.Verdict)
	fmt.Fprintln(w, e.Why)
	if e.Scope == "" || e.Verdict == adminapi.KeyNotFound {
		return nil
	}
	if e.Evicted != "" {
		fmt.Fprintln(w, "left the device's scopes:", e.Evicted)
	}
	token := "unknown (no session on this node)"
	if e.Connected {
		token = scopeSetText(e.TokenGrants)
	}
	fmt.Fprintf(w, "token grants: %s\n", token)
	fmt.Fprintf(w, "membership grants of %s: %s\n", e.Scope, cmp.Or(strings.Join(e.MemberGrants, ","), "-"))
	requested := "unknown (no set is recorded: the device has not subscribed with scopes; pass --want)"
	switch {
	case e.RequestedFrom == adminapi.RequestedWant:
		requested = scopeSetText(e.Requested) + " (--want)"
	case e.Requested != nil && e.RequestedAt != nil:
		requested = scopeSetText(e.Requested) + " (recorded at its last subscribe, " + stamp(*e.RequestedAt) + ")"
	}
	fmt.Fprintf(w, "requested: %s\n", requested)
	fmt.Fprintf(w, "history (oplog seqs %d to %d):\n", e.ScannedFrom+1, e.Head)
	t := newTable(w, "SEQ", "AT", "EVENT", "FROM", "TO", "ROW", "BY")
	for _, ev := range e.Events {
		row := "-"
		if ev.Model != "" {
			row = ev.Model + "/" + ev.Key
		}
		t.row(strconv.FormatUint(ev.Seq, 10), stamp(ev.At), ev.Kind, cmp.Or(ev.From, "-"), cmp.Or(ev.To, "-"), row, cmp.Or(ev.ClientID, "-"))
	}
	return t.flush()
}
