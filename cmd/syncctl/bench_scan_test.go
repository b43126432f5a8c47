package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncproto"
)

// The generator's one-pass reading of a changes frame finds exactly the
// seqs and cursor a full decode finds, whatever the values hold (keys
// named seq, escaped quotes, brackets in strings), and declines anything
// else, which is then decoded the ordinary way.
func TestScanChangesReadsWhatAFullDecodeReads(t *testing.T) {
	clock := syncproto.NewClock("dev", nil)
	values := []string{`{"v":"abc"}`, `{"seq":99,"entries":[{"seq":7}]}`, `"a \" ] } , \\"`, `[1,{"x":[{}]},null,true,-2.5e3]`, `null`, `{}`}
	var entries []syncproto.Change
	for i, v := range values {
		op, err := syncproto.NewOpID()
		require.NoError(t, err)
		entries = append(entries, syncproto.Change{Seq: uint64(10 + i), OpID: op, Model: "m", Key: "k", Op: syncproto.OpPut,
			Value: json.RawMessage(v), Version: 1, HLC: clock.Now()})
	}
	for _, ch := range []*syncproto.Changes{
		{ID: "feed", Entries: entries, Cursor: 15, Head: 20, More: true},
		{ID: "feed", Entries: []syncproto.Change{}, Cursor: 3, Head: 3},
	} {
		frame, err := syncproto.Encode(ch)
		require.NoError(t, err)
		var seqs []uint64
		cursor, ok := scanChanges(frame, func(s uint64) { seqs = append(seqs, s) })
		require.True(t, ok, "%s", frame)
		require.Equal(t, ch.Cursor, cursor)
		var want []uint64
		for _, e := range ch.Entries {
			want = append(want, e.Seq)
		}
		require.Equal(t, want, seqs)
		for cut := 1; cut < len(frame); cut += 7 {
			_, ok := scanChanges(frame[:cut], func(uint64) { t.Fatal("a truncated frame reported a seq") })
			require.False(t, ok, "truncated at %d", cut)
		}
	}
	pong, err := syncproto.Encode(&syncproto.Pong{ID: "p"})
	require.NoError(t, err)
	_, ok := scanChanges(pong, func(uint64) {})
	require.False(t, ok)
}
