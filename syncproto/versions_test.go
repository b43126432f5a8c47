package syncproto_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncproto"
)

func TestValueVersionMember(t *testing.T) {
	base := `{"op_id":"01938a5e-7b2c-7cde-8f01-23456789abcd","model":"notes","key":"a","op":"put","value":1,"hlc":"1733140000020.0.phone-7"`
	for _, tc := range []struct {
		member string
		want   uint64
		code   syncproto.Code
	}{
		{``, 0, ""},
		{`,"value_version":2`, 2, ""},
		{`,"value_version":1048576`, syncproto.MaxValueVersion, ""},
		{`,"value_version":1048577`, 0, syncproto.CodeBadRequest},
		{`,"value_version":"2"`, 0, syncproto.CodeBadRequest},
		{`,"value_version":-1`, 0, syncproto.CodeBadRequest},
	} {
		var m syncproto.Mutation
		require.NoError(t, json.Unmarshal([]byte(base+tc.member+`}`), &m), tc.member)
		err := m.Validate()
		if tc.code != "" {
			requireCode(t, err, tc.code, "")
			require.ErrorContains(t, err, "value_version", tc.member)
			continue
		}
		require.NoError(t, err, tc.member)
		require.Equal(t, tc.want, m.ValueVersion)
		require.Equal(t, max(1, tc.want), m.EffectiveValueVersion())
	}
}

func TestValueVersionIsContentAboveOne(t *testing.T) {
	m := syncproto.Mutation{OpID: "01938a5e-7b2c-7cde-8f01-23456789abcd", Model: "notes", Key: "a", Op: syncproto.OpPut, Value: json.RawMessage(`1`)}
	plain := m.Digest()
	m.ValueVersion = 1
	require.Equal(t, plain, m.Digest(), "version 1 is the unversioned write")
	m.ValueVersion = 2
	require.NotEqual(t, plain, m.Digest())
}

func TestAcceptedVersions(t *testing.T) {
	require.True(t, syncproto.Accepts(nil, 7), "a model announced without versions takes every version")
	require.True(t, syncproto.Accepts([]uint64{2, 3}, 3))
	require.False(t, syncproto.Accepts([]uint64{2, 3}, 1))
	require.False(t, syncproto.Accepts([]uint64{2, 3}, 4))

	r := syncproto.Result{OpID: "01938a5e-7b2c-7cde-8f01-23456789abcd", Status: syncproto.StatusRejected, Code: syncproto.CodeNeedsUpgrade, AcceptedVersions: []uint64{2, 3}}
	require.NoError(t, r.Validate())
	require.Equal(t, syncproto.ActionPause, r.Action())
	require.Equal(t, "pause", r.Action().String())
	for _, bad := range [][]uint64{{3, 2}, {2, 2}, {0}, {syncproto.MaxValueVersion + 1}, make([]uint64, syncproto.MaxAcceptedVersions+1)} {
		r.AcceptedVersions = bad
		require.Error(t, r.Validate(), "%v", bad)
	}
	r.Code = syncproto.CodeUpcastFailed
	r.AcceptedVersions = nil
	require.Equal(t, syncproto.ActionPause, r.Action())
}

func TestWelcomeValueVersions(t *testing.T) {
	w := syncproto.Welcome{ID: "h1", NodeID: "node-1", ServerHLC: syncproto.Timestamp{Wall: 1, Origin: "node-1"}, ServerTime: 1,
		DatabaseID: "db-1", Limits: syncproto.DefaultLimits(), ValueVersions: map[string][]uint64{"notes": {1, 2}}}
	require.NoError(t, w.Validate())
	w.ValueVersions["notes"] = []uint64{2, 1}
	require.ErrorContains(t, w.Validate(), `model "notes"`)
	w.ValueVersions = map[string][]uint64{"Bad": {1}}
	require.Error(t, w.Validate())
}
