package syncproto_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncproto"
)

func snapshotRecords() []syncproto.SnapshotRecord {
	return []syncproto.SnapshotRecord{
		{Model: "todos", Key: "t/1", Value: json.RawMessage(`{"title":"milk <&>"}`), Version: 3, HLC: ts(10, 0, "client-a")},
		{Model: "docs", Key: "readme", Value: json.RawMessage(`null`), Version: 1, HLC: ts(11, 2, "client-b")},
	}
}

func writeSnapshot(t *testing.T, head uint64, recs []syncproto.SnapshotRecord) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := syncproto.NewSnapshotWriter(&buf, head)
	require.NoError(t, err)
	for _, r := range recs {
		require.NoError(t, w.Write(r))
	}
	require.NoError(t, w.Close())
	return buf.Bytes()
}

func readSnapshot(body []byte) (uint64, []syncproto.SnapshotRecord, error) {
	r, err := syncproto.NewSnapshotReader(bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	var recs []syncproto.SnapshotRecord
	for range 1000 {
		rec, err := r.Next()
		if err == io.EOF {
			return r.Head(), recs, nil
		}
		if err != nil {
			return r.Head(), recs, err
		}
		recs = append(recs, rec)
	}
	return r.Head(), recs, errors.New("snapshot did not end")
}

func TestSnapshotRoundTrip(t *testing.T) {
	body := writeSnapshot(t, 58, snapshotRecords())
	require.Equal(t, `{"head":58}
{"model":"todos","key":"t/1","value":{"title":"milk <&>"},"version":3,"hlc":"10.0.client-a","deleted":false}
{"model":"docs","key":"readme","value":null,"version":1,"hlc":"11.2.client-b","deleted":false}
{"end":true,"records":2}
`, string(body))

	head, recs, err := readSnapshot(body)
	require.NoError(t, err)
	require.Equal(t, uint64(58), head)
	require.Equal(t, snapshotRecords(), recs)

	empty := writeSnapshot(t, 0, nil)
	head, recs, err = readSnapshot(empty)
	require.NoError(t, err)
	require.Zero(t, head)
	require.Empty(t, recs)
}

func TestSnapshotTruncation(t *testing.T) {
	body := writeSnapshot(t, 58, snapshotRecords())
	lines := strings.SplitAfter(string(body), "\n")
	// Cut at every line boundary before the trailer: always truncated.
	for n := 1; n < len(lines)-1; n++ {
		_, _, err := readSnapshot([]byte(strings.Join(lines[:n], "")))
		require.ErrorIs(t, err, syncproto.ErrSnapshotTruncated, "cut after %d lines", n)
	}
	// Cut inside any byte: never read as complete.
	for n := 0; n < len(body)-1; n++ {
		_, _, err := readSnapshot(body[:n])
		require.Error(t, err, "cut at byte %d", n)
	}
	// A trailer that disagrees with the records read.
	_, _, err := readSnapshot([]byte(lines[0] + lines[1] + `{"end":true,"records":2}` + "\n"))
	require.ErrorIs(t, err, syncproto.ErrSnapshotTruncated)
}

func TestSnapshotRefusesBadLines(t *testing.T) {
	bad := []string{
		"",
		"[]\n",
		`{"heads":1}` + "\n",
		`{"head":-1}` + "\n",
		`{"head":1}` + "\n" + `{"model":"Todos","key":"k","value":1,"version":1,"hlc":"1.0.c","deleted":false}` + "\n",
		`{"head":1}` + "\n" + `{"model":"m","key":"k","value":1,"version":1,"hlc":"1.0.c","deleted":true}` + "\n",
		`{"head":1}` + "\n" + `{"model":"m","key":"k","version":1,"hlc":"1.0.c"}` + "\n",
		`{"head":1}` + "\n" + `{"model":"m","key":"k","value":1,"version":0,"hlc":"1.0.c"}` + "\n",
		`{"head":1}` + "\n" + `{"model":"m","key":"k","value":1,"version":1}` + "\n",
		`{"head":1}` + "\n" + `not json` + "\n",
	}
	for _, body := range bad {
		_, _, err := readSnapshot([]byte(body))
		require.Error(t, err, "%q", body)
	}

	var buf bytes.Buffer
	w, err := syncproto.NewSnapshotWriter(&buf, 1)
	require.NoError(t, err)
	err = w.Write(syncproto.SnapshotRecord{Model: "m", Key: "", Value: json.RawMessage(`1`), Version: 1, HLC: ts(1, 0, "c")})
	requireCode(t, errors.Unwrap(err), syncproto.CodeInvalidKey, "")
	_, err = syncproto.NewSnapshotWriter(&buf, 1<<53)
	require.Error(t, err)
}

// encodeWithJSON is what the SnapshotWriter's own encoder must match: the
// record through encoding/json without HTML escaping, one line.
func encodeWithJSON(t testing.TB, rec syncproto.SnapshotRecord) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// recordLines writes recs and returns their lines (header and trailer cut).
func recordLines(t *testing.T, recs []syncproto.SnapshotRecord) []string {
	t.Helper()
	lines := strings.SplitAfter(string(writeSnapshot(t, 7, recs)), "\n")
	return lines[1 : len(lines)-2]
}

func TestSnapshotWriterEncodesAsEncodingJSON(t *testing.T) {
	values := []string{
		`1`, `null`, `"s"`, `{"a":1}`, `[1, 2 ,3]`, "{\n\t\"a\" : [ 1 , \"x y\" ],\r\n \"b\":{ } }",
		`"a \"quoted\" \\ word"`, `"esc \n \u0000 \\"`, `"<&> é ☃ \u2028"`, "\"raw \u2028 \u2029 ☃\"",
		` { "padded" : true } `,
	}
	keys := []string{"k", "t/1", `quo"te`, `back\slash`, "é-☃", "sep\u2028ar", "<&>", "tilde~end"}
	var recs []syncproto.SnapshotRecord
	for i, v := range values {
		recs = append(recs, syncproto.SnapshotRecord{Model: "notes", Key: keys[i%len(keys)], Value: json.RawMessage(v), Version: uint64(i + 1), HLC: ts(int64(1000+i), uint32(i), "client-a")})
	}
	for i, k := range keys {
		recs = append(recs, syncproto.SnapshotRecord{Model: "m_2", Key: k, Value: json.RawMessage(`{"n":1}`), Version: 1 << 40, HLC: ts(int64(i), 0, "o:x.y")})
	}
	got := recordLines(t, recs)
	require.Len(t, got, len(recs))
	for i, rec := range recs {
		require.Equal(t, encodeWithJSON(t, rec), got[i], "record %d", i)
	}
	head, read, err := readSnapshot(writeSnapshot(t, 7, recs))
	require.NoError(t, err)
	require.Equal(t, uint64(7), head)
	require.Len(t, read, len(recs))
}

func TestSnapshotWriterRefusesWhatWouldSplitALine(t *testing.T) {
	var buf bytes.Buffer
	w, err := syncproto.NewSnapshotWriter(&buf, 1)
	require.NoError(t, err)
	for _, v := range []string{"\"a\nb\"", "[1,\x01]"} {
		err := w.Write(syncproto.SnapshotRecord{Model: "m", Key: "k", Value: json.RawMessage(v), Version: 1, HLC: ts(1, 0, "c")})
		require.Error(t, err, "%q", v)
	}
	require.NoError(t, w.Write(syncproto.SnapshotRecord{Model: "m", Key: "k", Value: json.RawMessage(`2`), Version: 1, HLC: ts(1, 0, "c")}))
	require.NoError(t, w.Close())
	_, recs, err := readSnapshot(buf.Bytes())
	require.NoError(t, err)
	require.Len(t, recs, 1, "a refused record leaves nothing behind")
}

// A snapshot larger than the writer's buffer reads back whole.
func TestSnapshotWriterFlushesLargeBodies(t *testing.T) {
	var recs []syncproto.SnapshotRecord
	value := json.RawMessage(`"` + strings.Repeat("v", 1000) + `"`)
	for i := range 300 {
		recs = append(recs, syncproto.SnapshotRecord{Model: "notes", Key: strconv.Itoa(i), Value: value, Version: 1, HLC: ts(int64(i), 0, "c")})
	}
	head, read, err := readSnapshot(writeSnapshot(t, 9, recs))
	require.NoError(t, err)
	require.Equal(t, uint64(9), head)
	require.Equal(t, recs, read)
}
