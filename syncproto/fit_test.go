package syncproto_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncproto"
)

// bigResults returns n superseded results whose winners hold string values
// of valueBytes each, the i-th one i bytes longer so that their sizes
// differ, and one applied result between each.
func bigResults(t *testing.T, n, valueBytes int) []syncproto.Result {
	t.Helper()
	clock := syncproto.NewClock("laptop-2", nil)
	var out []syncproto.Result
	for i := range n {
		op, err := syncproto.NewOpID()
		require.NoError(t, err)
		value, err := json.Marshal(strings.Repeat("v", valueBytes+i))
		require.NoError(t, err)
		out = append(out, syncproto.Result{OpID: op, Status: syncproto.StatusSuperseded,
			Winner: &syncproto.Winner{Version: uint64(i + 1), Value: value, HLC: clock.Now()}})
		op, err = syncproto.NewOpID()
		require.NoError(t, err)
		out = append(out, syncproto.Result{OpID: op, Status: syncproto.StatusApplied, Version: 1, Seq: uint64(i + 1), HLC: clock.Now()})
	}
	return out
}

// An answer within the frame is encoded as Encode does, whole.
func TestEncodePushResultKeepsAnAnswerThatFits(t *testing.T) {
	m := &syncproto.PushResult{ID: "p1", Results: bigResults(t, 3, 1000)}
	frame, omitted, err := syncproto.EncodePushResult(m, syncproto.MaxFrameBytes)
	require.NoError(t, err)
	require.Zero(t, omitted)
	want, err := syncproto.Encode(m)
	require.NoError(t, err)
	require.Equal(t, string(want), string(frame))
}

// Winners too large for one frame together: the largest values are left
// out, just enough of them, the frame fits and decodes, and the caller's
// message is untouched.
func TestEncodePushResultOmitsTheLargestWinnerValues(t *testing.T) {
	const n, valueBytes = 24, syncproto.MaxPayloadBytes - 100
	m := &syncproto.PushResult{ID: "p1", Results: bigResults(t, n, valueBytes)}
	for _, limit := range []int{syncproto.MaxFrameBytes, 1 << 20, 64 << 10} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			frame, omitted, err := syncproto.EncodePushResult(m, limit)
			require.NoError(t, err)
			require.LessOrEqual(t, len(frame), limit)
			require.Positive(t, omitted)

			msg, err := syncproto.Decode(frame)
			require.NoError(t, err)
			got := msg.(*syncproto.PushResult)
			require.Len(t, got.Results, len(m.Results))
			var kept, dropped []int // value sizes
			for i, r := range got.Results {
				orig := m.Results[i]
				require.Equal(t, orig.OpID, r.OpID)
				require.Equal(t, orig.Status, r.Status)
				if orig.Winner == nil {
					require.Nil(t, r.Winner)
					continue
				}
				require.Equal(t, orig.Winner.Version, r.Winner.Version)
				require.Equal(t, orig.Winner.HLC, r.Winner.HLC)
				if r.Winner.ValueOmitted {
					require.Empty(t, r.Winner.Value)
					dropped = append(dropped, len(orig.Winner.Value))
				} else {
					require.Equal(t, string(orig.Winner.Value), string(r.Winner.Value))
					kept = append(kept, len(orig.Winner.Value))
				}
			}
			require.Len(t, dropped, omitted)
			for _, k := range kept {
				for _, d := range dropped {
					require.Less(t, k, d, "a smaller value was left out before a larger one")
				}
			}
			// Just enough: keeping the smallest omitted value would not fit.
			if len(kept) > 0 {
				require.Greater(t, len(frame)+dropped[len(dropped)-1], limit-len(`,"value_omitted":true`))
			}
		})
	}
	for _, r := range m.Results {
		if r.Winner != nil {
			require.False(t, r.Winner.ValueOmitted, "the caller's message was modified")
			require.NotEmpty(t, r.Winner.Value)
		}
	}
}

// A limit too small for the answer even without values is a
// frame_too_large error, never a frame over the limit.
func TestEncodePushResultRefusesALimitTooSmall(t *testing.T) {
	m := &syncproto.PushResult{ID: "p1", Results: bigResults(t, 4, 10)}
	_, _, err := syncproto.EncodePushResult(m, 100)
	var perr *syncproto.Error
	require.ErrorAs(t, err, &perr)
	require.Equal(t, syncproto.CodeFrameTooLarge, perr.Code)
}

// value_omitted is only for a live winner without its value.
func TestWinnerValueOmittedValidation(t *testing.T) {
	ts := syncproto.NewClock("laptop-2", nil).Now()
	valid := func(w syncproto.Winner) error {
		r := syncproto.Result{OpID: "01938a5e-7b2c-7cde-8f01-23456789abce", Status: syncproto.StatusConflict, Winner: &w}
		return r.Validate()
	}
	require.NoError(t, valid(syncproto.Winner{Version: 2, HLC: ts, ValueOmitted: true}))
	require.Error(t, valid(syncproto.Winner{Version: 2, HLC: ts, ValueOmitted: true, Value: json.RawMessage(`1`)}))
	require.Error(t, valid(syncproto.Winner{Version: 2, HLC: ts, ValueOmitted: true, Deleted: true}))
	require.Error(t, valid(syncproto.Winner{Version: 2, HLC: ts}))
}
