package client

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/synccore"
	"github.com/syncd-dev/syncd/syncproto"
)

// The durable outcome the driver records for each verdict of the core's
// judge (synccore.Judge, PROTOCOL.md section 6).
func TestOutcomeOfVerdict(t *testing.T) {
	now := time.UnixMilli(1_733_140_000_000)
	ts := syncproto.Timestamp{Wall: 1_733_139_999_000, Origin: "phone-1"}
	winner := &syncproto.Winner{Version: 7, Value: []byte(`{"n":7}`), HLC: ts}
	const op = "01938a5e-7b2c-7cde-8f01-23456789abcd"
	tests := []struct {
		name   string
		result syncproto.Result
		want   Outcome
	}{
		{"applied, with its version",
			syncproto.Result{OpID: op, Status: syncproto.StatusApplied, Version: 3, Seq: 42, HLC: ts},
			Outcome{OpID: op, Status: StatusApplied, Version: 3, Seq: 42, HLC: ts, DecidedAt: now}},
		{"superseded, with the winner",
			syncproto.Result{OpID: op, Status: syncproto.StatusSuperseded, Winner: winner},
			Outcome{OpID: op, Status: StatusSuperseded, Winner: winner, DecidedAt: now}},
		{"a duplicate repeats the first decision",
			syncproto.Result{OpID: op, Status: syncproto.StatusDuplicate, OriginalStatus: syncproto.StatusApplied, Version: 3, Seq: 42, HLC: ts},
			Outcome{OpID: op, Status: StatusApplied, Version: 3, Seq: 42, HLC: ts, DecidedAt: now}},
		{"conflict, with the winner",
			syncproto.Result{OpID: op, Status: syncproto.StatusConflict, Winner: winner},
			Outcome{OpID: op, Status: StatusConflict, Winner: winner, DecidedAt: now}},
		{"a permanent refusal is dead-lettered at its first answer, with the code",
			syncproto.Result{OpID: op, Status: syncproto.StatusRejected, Code: syncproto.CodeForbiddenModel, Message: "token may not write secret"},
			Outcome{OpID: op, Status: StatusDeadLettered, Reason: "forbidden_model: token may not write secret", DecidedAt: now}},
		{"expired is dead-lettered",
			syncproto.Result{OpID: op, Status: syncproto.StatusExpired, Message: "older than the ledger"},
			Outcome{OpID: op, Status: StatusDeadLettered, Reason: "expired: older than the ledger", DecidedAt: now}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := synccore.Judge(&tt.result, 0, DefaultMaxAttempts)
			s := synccore.Settle{Item: synccore.Item{Mutation: syncproto.Mutation{OpID: op}}, Verdict: v}
			require.Equal(t, tt.want, outcome(s, now))
		})
	}
}
