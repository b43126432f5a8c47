package syncproto_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
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
