package syncproto_test

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncproto"
)

// TestScopedSnapshotRoundTrip: the header's scopes and the records'
// scope_value are written as encoding/json writes them and read back; an
// invalid scope value is refused on both sides.
func TestScopedSnapshotRoundTrip(t *testing.T) {
	recs := []syncproto.SnapshotRecord{
		{Model: "tasks", Key: "t1", Value: json.RawMessage(`{"project_id":"p\"1"}`), Version: 2, HLC: ts(10, 0, "a"), ScopeValue: `p"1`},
		{Model: "notes", Key: "n1", Value: json.RawMessage(`1`), Version: 1, HLC: ts(11, 0, "a")},
	}
	held := syncproto.ScopeSet{"project": {`p"1`}}
	var buf bytes.Buffer
	w, err := syncproto.NewScopedSnapshotWriter(&buf, 9, held)
	require.NoError(t, err)
	for _, r := range recs {
		require.NoError(t, w.Write(r))
	}
	require.NoError(t, w.Close())
	lines := bytes.Split(buf.Bytes(), []byte("\n"))
	require.Equal(t, `{"head":9,"scopes":{"project":["p\"1"]}}`, string(lines[0]))
	want, err := json.Marshal(recs[0])
	require.NoError(t, err)
	require.Equal(t, string(want), string(lines[1]), "as encoding/json writes it")

	r, err := syncproto.NewSnapshotReader(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.Equal(t, held, r.Scopes())
	for _, want := range recs {
		got, err := r.Next()
		require.NoError(t, err)
		require.Equal(t, want.ScopeValue, got.ScopeValue)
	}
	_, err = r.Next()
	require.ErrorIs(t, err, io.EOF)

	bad := recs[0]
	bad.ScopeValue = "*"
	require.Error(t, w.Write(bad))
	_, err = syncproto.NewSnapshotReader(bytes.NewReader([]byte(`{"head":1,"scopes":{"project":["a","*"]}}` + "\n")))
	require.Error(t, err)
}
