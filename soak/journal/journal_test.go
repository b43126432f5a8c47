package journal_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/soak/journal"
)

func TestWriteThenRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.ndjson")
	w, err := journal.Create(path)
	require.NoError(t, err)
	base := uint64(3)
	want := []journal.Entry{
		{Kind: journal.KindIntent, At: time.UnixMilli(1).UTC(), Client: "c00", Write: "c00/1/1", Class: journal.ClassOptimistic, Model: "docs", Key: "k1", Op: "put", Base: &base},
		{Kind: journal.KindMade, At: time.UnixMilli(2).UTC(), Client: "c00", Write: "c00/1/1", OpID: "op", Class: journal.ClassOptimistic, Model: "docs", Key: "k1", Op: "put", Base: &base},
		{Kind: journal.KindHandler, At: time.UnixMilli(3).UTC(), Client: "c00", OpID: "op", Decision: journal.DecisionDrop},
		{Kind: journal.KindReceived, At: time.UnixMilli(3).UTC(), Client: "c00", Model: "tasks", Key: "t1", Op: "put", Version: 2, Seq: 17, ScopeValue: "p1", ValueSHA: "ab"},
		{Kind: journal.KindReceived, At: time.UnixMilli(3).UTC(), Client: "c00", Model: "tasks", Key: "t1", Op: "evict", Seq: 18, ScopeValue: "p1", Reason: "moved"},
		{Kind: journal.KindResync, At: time.UnixMilli(3).UTC(), Client: "c00", Seq: 20},
		{Kind: journal.KindSnapshot, At: time.UnixMilli(3).UTC(), Client: "c00", Model: "tasks", Key: "t2", Op: "put", Version: 1, Seq: 20, ScopeValue: "p2"},
		{Kind: journal.KindLagged, At: time.UnixMilli(3).UTC(), Client: "c00"},
	}
	for _, e := range want {
		require.NoError(t, w.Append(e))
	}
	require.NoError(t, w.Close())

	// A reopened journal appends.
	w, err = journal.Create(path)
	require.NoError(t, err)
	extra := journal.Entry{Kind: journal.KindFailed, At: time.UnixMilli(4).UTC(), Client: "c00", Write: "c00/2/1", Err: "closed"}
	require.NoError(t, w.Append(extra))
	require.NoError(t, w.Close())

	got, err := journal.Read(path)
	require.NoError(t, err)
	require.Equal(t, append(want, extra), got)
}

func TestReadMissingIsEmpty(t *testing.T) {
	got, err := journal.Read(filepath.Join(t.TempDir(), "none"))
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestTornTailIsDroppedCorruptionIsNot(t *testing.T) {
	good := `{"kind":"made","at":"2026-01-01T00:00:00Z","client":"c","op_id":"a"}` + "\n"
	got, err := journal.Decode(strings.NewReader(good + `{"kind":"made","at":"2026`))
	require.NoError(t, err, "a crash mid-append leaves a torn last line")
	require.Len(t, got, 1)

	_, err = journal.Decode(strings.NewReader(good + "{torn\n" + good))
	require.ErrorIs(t, err, journal.ErrCorrupt)
}

func TestValue(t *testing.T) {
	raw := journal.Value{Write: "c01/2/3", Depth: 1, Pad: "xy"}.Encode()
	v, ok := journal.ParseValue(raw)
	require.True(t, ok)
	assert.Equal(t, journal.Value{Write: "c01/2/3", Depth: 1, Pad: "xy"}, v)
	for _, foreign := range []string{"", "null", `{"other":1}`, "not json"} {
		_, ok := journal.ParseValue([]byte(foreign))
		assert.False(t, ok, foreign)
	}
	assert.Equal(t, journal.ValueSHA([]byte(`{"w":"a"}`)), journal.ValueSHA([]byte("{ \"w\" : \"a\" }\n")), "whitespace does not count")
	assert.NotEqual(t, journal.ValueSHA([]byte(`{"w":"a"}`)), journal.ValueSHA([]byte(`{"w":"b"}`)))
	assert.Empty(t, journal.ValueSHA(nil))
}

func TestCreateFailsOnADirectory(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "j"), 0o755))
	_, err := journal.Create(filepath.Join(dir, "j"))
	require.Error(t, err)
}
