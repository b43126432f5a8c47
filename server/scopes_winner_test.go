package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestScopedWinnersLeftOutAreNotReadOnResend: a device's writes to rows
// of a value it holds lose (an older clock) to writes with values too
// large for one answer: the answer carries the winners of the value it
// may read, some left out (value_omitted). Then half the rows move to a
// value the device was never granted, and the device, reconnecting, also
// loses its token's grant of the first value; resending each op alone,
// the ledger's duplicate answer carries no winner value (value_withheld),
// neither of the value it lost nor of the one it never held.
func TestScopedWinnersLeftOutAreNotReadOnResend(t *testing.T) {
	const keys = 18 // winners of ~256 KiB: about 4.5 MiB together
	ts := startServer(t, server.Config{Scopes: projectScopes(t), Quotas: noQuotas})
	owner := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "owner", User: "owner", Read: []string{"*"}, Write: []string{"*"},
		Scopes: map[string][]string{"project": {"*"}}})
	oc, oclock := session(t, ts, owner, "owner")
	big := func(value string, i int) string {
		return fmt.Sprintf(`{"project_id":%q,"pad":%q}`, value, strings.Repeat(string(rune('a'+i)), syncproto.MaxPayloadBytes-100))
	}
	tok := func(grants ...string) string {
		return ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", User: "u", Read: []string{"*"}, Write: []string{"*"},
			Scopes: map[string][]string{"project": grants}})
	}
	c, _ := session(t, ts, tok("p1"), "phone")
	older := syncproto.NewClock("phone", func() time.Time { return time.Now().Add(-time.Hour) })
	var losers []syncproto.Mutation
	for i := 0; i < keys; i += 3 {
		var muts []syncproto.Mutation
		for k := i; k < i+3; k++ {
			key := fmt.Sprintf("k%02d", k)
			muts = append(muts, put(t, oclock, "tasks", key, big("p1", k)))
			losers = append(losers, put(t, older, "tasks", key, `{"project_id":"p1","n":1}`))
		}
		requireApplied(t, oc.push(fmt.Sprint("w", i), muts...))
	}
	results := c.push("losers", losers...)
	omitted := 0
	for i, r := range results {
		require.Equal(t, syncproto.StatusSuperseded, r.Status, "result %d: %s %s", i, r.Code, r.Message)
		require.False(t, r.Winner.ValueWithheld, "a winner of p1, which the device holds")
		if r.Winner.ValueOmitted {
			omitted++
			continue
		}
		require.JSONEq(t, big("p1", i), string(r.Winner.Value))
	}
	require.Positive(t, omitted, "the answer held every winner value")

	for i := 0; i < keys; i += 2 {
		key := fmt.Sprintf("k%02d", i)
		requireApplied(t, oc.push("move"+key, put(t, oclock, "tasks", key, big("p9", i))))
	}
	c.conn.CloseNow()
	for _, grants := range [][]string{{"p1"}, {"p2"}} {
		c, _ = session(t, ts, tok(grants...), "phone")
		for i, m := range losers {
			again := c.push(fmt.Sprintf("again%d", i), m)[0]
			require.Equal(t, syncproto.StatusDuplicate, again.Status)
			require.Equal(t, syncproto.StatusSuperseded, again.OriginalStatus)
			require.NotNil(t, again.Winner)
			require.Empty(t, again.Winner.Value, "grants %v: the resend of %s carries no winner value", grants, m.Key)
			require.True(t, again.Winner.ValueWithheld, "grants %v: %s", grants, m.Key)
			require.False(t, again.Winner.ValueOmitted)
			require.NotZero(t, again.Winner.Version)
		}
		c.conn.CloseNow()
	}
}
