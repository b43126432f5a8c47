package offlinequeue

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// fileFuzzSeeds are queue files: valid ones, torn ones and corrupt ones.
func fileFuzzSeeds(f *testing.F) [][]byte {
	f.Helper()
	golden, err := os.ReadFile(filepath.Join("testdata", "v1.ndjson"))
	require.NoError(f, err)
	hdr, err := appendRecord(nil, headerRecord())
	require.NoError(f, err)
	seeds := [][]byte{
		nil,
		hdr,
		golden,
		append(bytes.Clone(golden), `{"op":"put","id":10,"payl`...),
		append(bytes.Clone(golden), "garbage\n"...),
		append(bytes.Clone(golden), "\x00\x00\x00\x00"...),
		bytes.Replace(golden, []byte(`"id":4,`), []byte(`"id":4,,`), 1),
		bytes.Replace(golden, []byte(`"version":1`), []byte(`"version":2`), 1),
		append(bytes.Clone(hdr), `{"op":"requeue","ids":[1],"new":[1]}`+"\n"...),
	}
	for cut := len(golden) - 60; cut < len(golden); cut += 7 {
		seeds = append(seeds, golden[:cut])
	}
	return seeds
}

// FuzzLoad opens arbitrary bytes as a queue file. The open either fails,
// leaving the file byte-identical, or succeeds with a consistent state that a
// second open reproduces exactly from a clean file.
func FuzzLoad(f *testing.F) {
	for _, s := range fileFuzzSeeds(f) {
		f.Add(s)
	}
	fsys := noSyncFS{osFS{}}
	path := filepath.Join(f.TempDir(), "q") // inputs run one at a time
	f.Fuzz(func(t *testing.T, data []byte) {
		require.NoError(t, os.WriteFile(path, data, 0o600))
		q, err := OpenFile(path, FileOptions{FS: fsys})
		if err != nil {
			after, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			require.Equal(t, data, after, "a failed open changed the file")
			return
		}
		first := fileStateOf(t, q)
		requireConsistentState(t, q.st)
		require.NoError(t, q.Close())

		q, err = OpenFile(path, FileOptions{FS: fsys})
		require.NoError(t, err, "a file the queue compacted does not open again")
		require.Equal(t, string(first), string(fileStateOf(t, q)))
		require.NoError(t, q.Close())
		requireCleanFile(t, path, first)
	})
}

// FuzzDecodeRecord feeds arbitrary lines to the record decoder. It must not
// panic, and what it accepts must encode to a line that decodes to the same
// record.
func FuzzDecodeRecord(f *testing.F) {
	for _, s := range fileFuzzSeeds(f) {
		for line := range bytes.Lines(s) {
			f.Add(bytes.TrimSuffix(line, []byte("\n")))
		}
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := decodeRecord(line)
		if err != nil {
			return
		}
		enc, err := appendRecord(nil, r)
		require.NoError(t, err)
		require.True(t, bytes.HasSuffix(enc, []byte("\n")))
		require.Equal(t, 1, bytes.Count(enc, []byte("\n")), "a record encoded to more than one line")
		again, err := decodeRecord(bytes.TrimSuffix(enc, []byte("\n")))
		require.NoError(t, err, "a decoded record re-encodes to a line the decoder refuses: %s", enc)
		enc2, err := appendRecord(nil, again)
		require.NoError(t, err)
		require.Equal(t, string(enc), string(enc2))
	})
}

// requireConsistentState checks the invariants fileState's indexes keep.
func requireConsistentState(t *testing.T, st *fileState) {
	t.Helper()
	require.Len(t, st.order.ids, len(st.pending))
	require.True(t, slices.IsSorted(st.order.ids))
	require.Len(t, st.deadOrder.ids, len(st.dead))
	require.True(t, slices.IsSorted(st.deadOrder.ids))
	keyed := 0
	for _, id := range st.order.ids {
		it := st.pending[id]
		require.NotNil(t, it, "order names %d, which is not pending", id)
		require.Equal(t, id, it.ID)
		require.LessOrEqual(t, id, st.hw)
		require.NotEmpty(t, it.Payload)
		if it.Key != "" {
			keyed++
			require.Equal(t, id, st.keys[it.Key], "key index of %d", id)
		}
	}
	require.Len(t, st.keys, keyed)
	for _, id := range st.deadOrder.ids {
		d := st.dead[id]
		require.NotNil(t, d, "dead order names %d, which is not a dead letter", id)
		require.Equal(t, id, d.ID)
		require.LessOrEqual(t, id, st.hw)
		require.NotContains(t, st.pending, id)
	}
}

// FuzzAppendPut checks that the put line an enqueue encodes before the
// lock and completes under it (encodePut, appendPut) is byte for byte the
// line appendRecord writes for the same record.
func FuzzAppendPut(f *testing.F) {
	f.Add(uint64(1), []byte("p"), "", int64(0))
	f.Add(uint64(1<<63), []byte("\x00\xff{\"}"), "op-\x00\xff", int64(1733140000000000000))
	f.Add(uint64(42), []byte(`{"op":"put"}`), "k", int64(-1))
	f.Fuzz(func(t *testing.T, id uint64, payload []byte, key string, at int64) {
		if id == 0 || len(payload) == 0 {
			return // a put has both (validateEnqueue, decodeRecord)
		}
		want, err := appendRecord(nil, &record{Op: opPut, ID: ID(id), Payload: payload, Key: []byte(key), At: at})
		require.NoError(t, err)
		rest, err := encodePut(payload, key, at)
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendPut(nil, ID(id), rest)))
	})
}
