package server_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// The binary's declarative upcasters: rename, default and drop steps, in
// the order declared, applied by a real server to a version-1 write.
func TestDeclaredUpcastStepsApplyInOrder(t *testing.T) {
	var d server.ValueVersionDecls
	require.NoError(t, d.SetCurrent("notes=2"))
	for _, step := range []string{"notes@1=rename:title:name", "notes@1=default:done:false", "notes@1=drop:legacy"} {
		require.NoError(t, d.SetUpcast(step))
	}
	for _, bad := range []string{"notes", "notes@x=drop:a", "notes@1=move:a:b", "notes@1=default:a:{", "notes@0=drop:a", "notes@1=rename:a"} {
		require.Error(t, d.SetUpcast(bad), bad)
	}
	require.Error(t, d.SetCurrent("notes=0"))
	require.Error(t, d.SetCurrent("notes"))
	require.NoError(t, d.SetCurrent("notes=2"))

	ts := startServer(t, server.Config{ValueVersions: d})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone-1"), "phone-1")
	res := c.push("p1", put(t, clock, "notes", "a", `{"title":"milk","legacy":1}`), put(t, clock, "notes", "b", `[1]`))
	requireApplied(t, res[:1])
	require.Equal(t, syncproto.CodeUpcastFailed, res[1].Code, "a value that is not an object")
	ch := c.pull("q1", 0)
	require.Len(t, ch.Entries, 1)
	var got map[string]any
	require.NoError(t, json.Unmarshal(ch.Entries[0].Value, &got))
	require.Equal(t, map[string]any{"name": "milk", "done": false}, got)
}
