package syncproto_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncproto"
)

func TestResultAction(t *testing.T) {
	tests := []struct {
		status, original syncproto.Status
		want             syncproto.Action
	}{
		{syncproto.StatusApplied, "", syncproto.ActionDone},
		{syncproto.StatusSuperseded, "", syncproto.ActionDone},
		{syncproto.StatusDuplicate, syncproto.StatusApplied, syncproto.ActionDone},
		{syncproto.StatusDuplicate, syncproto.StatusSuperseded, syncproto.ActionDone},
		{syncproto.StatusDuplicate, syncproto.StatusConflict, syncproto.ActionConflict},
		{syncproto.StatusConflict, "", syncproto.ActionConflict},
		{syncproto.StatusRejected, "", syncproto.ActionCharge},
		{syncproto.StatusExpired, "", syncproto.ActionDeadLetter},
		{"from_a_newer_server", "", syncproto.ActionCharge},
	}
	for _, tt := range tests {
		r := syncproto.Result{Status: tt.status, OriginalStatus: tt.original}
		require.Equal(t, tt.want, r.Action(), "%s/%s", tt.status, tt.original)
	}
	require.Equal(t, "dead_letter", syncproto.ActionDeadLetter.String())
	require.Equal(t, "unknown", syncproto.Action(0).String())
}

func TestResultValidate(t *testing.T) {
	hlc := ts(5, 0, "c")
	winner := &syncproto.Winner{Version: 2, Value: json.RawMessage(`1`), HLC: hlc}
	never := &syncproto.Winner{Version: 0, Deleted: true} // the key was never written
	valid := []syncproto.Result{
		{OpID: opA, Status: syncproto.StatusApplied, Version: 1, Seq: 1, HLC: hlc},
		{OpID: opA, Status: syncproto.StatusDuplicate, OriginalStatus: syncproto.StatusApplied, Version: 1, Seq: 1, HLC: hlc},
		{OpID: opA, Status: syncproto.StatusDuplicate, OriginalStatus: syncproto.StatusConflict, Winner: winner},
		{OpID: opA, Status: syncproto.StatusSuperseded, Winner: winner},
		{OpID: opA, Status: syncproto.StatusConflict, Winner: never},
		{OpID: opA, Status: syncproto.StatusRejected, Code: syncproto.CodeInvalidKey},
		{OpID: "", Status: syncproto.StatusRejected, Code: syncproto.CodeInvalidOpID},
		{OpID: opA, Status: syncproto.StatusExpired},
		{OpID: opA, Status: "from_a_newer_server"},
	}
	for i, r := range valid {
		require.NoError(t, r.Validate(), "valid[%d]", i)
	}
	invalid := []syncproto.Result{
		{OpID: "nope", Status: syncproto.StatusExpired},
		{OpID: opA, Status: ""},
		{OpID: opA, Status: "Applied!"},
		{OpID: opA, Status: syncproto.StatusApplied, Version: 1, HLC: hlc},
		{OpID: "", Status: syncproto.StatusApplied, Version: 1, Seq: 1, HLC: hlc},
		{OpID: opA, Status: syncproto.StatusDuplicate, Version: 1, Seq: 1, HLC: hlc},
		{OpID: opA, Status: syncproto.StatusDuplicate, OriginalStatus: syncproto.StatusRejected, Code: syncproto.CodeInvalidKey},
		{OpID: opA, Status: syncproto.StatusApplied, OriginalStatus: syncproto.StatusApplied, Version: 1, Seq: 1, HLC: hlc},
		{OpID: opA, Status: syncproto.StatusSuperseded},
		{OpID: opA, Status: syncproto.StatusConflict, Winner: &syncproto.Winner{Version: 1, HLC: hlc}},
		{OpID: opA, Status: syncproto.StatusConflict, Winner: &syncproto.Winner{Version: 1, Value: json.RawMessage(`1`), Deleted: true}},
		{OpID: opA, Status: syncproto.StatusRejected},
		{OpID: opA, Status: syncproto.StatusApplied, Version: 1 << 53, Seq: 1, HLC: hlc},
	}
	for i, r := range invalid {
		var pe *syncproto.Error
		require.ErrorAs(t, r.Validate(), &pe, "invalid[%d]", i)
	}
}

func TestLimitsValidate(t *testing.T) {
	require.NoError(t, syncproto.DefaultLimits().Validate())
	tighter := syncproto.DefaultLimits()
	tighter.MaxBatch, tighter.RequestsPerSecond, tighter.RequestBurst = 100, 50, 20
	require.NoError(t, tighter.Validate())

	edits := []func(l *syncproto.Limits){
		func(l *syncproto.Limits) { l.MaxFrameBytes = syncproto.MaxFrameBytes + 1 },
		func(l *syncproto.Limits) { l.MaxBatch = 0 },
		func(l *syncproto.Limits) { l.MaxPayloadBytes = -1 },
		func(l *syncproto.Limits) { l.MaxKeyBytes = syncproto.MaxKeyBytes + 1 },
		func(l *syncproto.Limits) { l.MaxPullLimit = syncproto.MaxPullLimit + 1 },
		func(l *syncproto.Limits) { l.MaxRequestIDBytes = 0 },
		func(l *syncproto.Limits) { l.MaxClockSkewMS = 0 },
		func(l *syncproto.Limits) { l.IdleTimeoutMS = -5 },
		func(l *syncproto.Limits) { l.RequestsPerSecond = -1 },
		func(l *syncproto.Limits) { l.RequestBurst = -1 },
	}
	for _, edit := range edits {
		l := syncproto.DefaultLimits()
		edit(&l)
		requireCode(t, l.Validate(), syncproto.CodeBadRequest, "")
	}
}
