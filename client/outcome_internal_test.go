package client

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/syncproto"
)

// judge maps every server answer to the sync worker's action as DESIGN 4.2
// and PROTOCOL.md section 6 say.
func TestJudge(t *testing.T) {
	now := time.UnixMilli(1_733_140_000_000)
	ts := syncproto.Timestamp{Wall: 1_733_139_999_000, Origin: "phone-1"}
	winner := &syncproto.Winner{Version: 7, Value: []byte(`{"n":7}`), HLC: ts}
	const op = "01938a5e-7b2c-7cde-8f01-23456789abcd"
	tests := []struct {
		name     string
		result   syncproto.Result
		attempts offlinequeue.Attempts
		max      int
		want     verdict
	}{
		{
			name:   "applied is done with its version",
			result: syncproto.Result{OpID: op, Status: syncproto.StatusApplied, Version: 3, Seq: 42, HLC: ts},
			want:   verdict{action: markDone, outcome: Outcome{OpID: op, Status: StatusApplied, Version: 3, Seq: 42, HLC: ts, DecidedAt: now}},
		},
		{
			name:   "superseded is done with the winner",
			result: syncproto.Result{OpID: op, Status: syncproto.StatusSuperseded, Winner: winner},
			want:   verdict{action: markDone, outcome: Outcome{OpID: op, Status: StatusSuperseded, Winner: winner, DecidedAt: now}},
		},
		{
			name:   "a duplicate of an applied write is done as applied",
			result: syncproto.Result{OpID: op, Status: syncproto.StatusDuplicate, OriginalStatus: syncproto.StatusApplied, Version: 3, Seq: 42, HLC: ts},
			want:   verdict{action: markDone, outcome: Outcome{OpID: op, Status: StatusApplied, Version: 3, Seq: 42, HLC: ts, DecidedAt: now}},
		},
		{
			name:   "a duplicate of a superseded write is done as superseded",
			result: syncproto.Result{OpID: op, Status: syncproto.StatusDuplicate, OriginalStatus: syncproto.StatusSuperseded, Winner: winner},
			want:   verdict{action: markDone, outcome: Outcome{OpID: op, Status: StatusSuperseded, Winner: winner, DecidedAt: now}},
		},
		{
			name:   "a conflict goes to the handler with the winner",
			result: syncproto.Result{OpID: op, Status: syncproto.StatusConflict, Winner: winner},
			want:   verdict{action: handleConflict, outcome: Outcome{OpID: op, Status: StatusConflict, Winner: winner, DecidedAt: now}},
		},
		{
			name:   "a duplicate of a conflict goes to the handler, whose first answer may be lost",
			result: syncproto.Result{OpID: op, Status: syncproto.StatusDuplicate, OriginalStatus: syncproto.StatusConflict, Winner: winner},
			want:   verdict{action: handleConflict, outcome: Outcome{OpID: op, Status: StatusConflict, Winner: winner, DecidedAt: now}},
		},
		{
			name:   "a first rejection charges one attempt",
			result: syncproto.Result{OpID: op, Status: syncproto.StatusRejected, Code: syncproto.CodeForbiddenModel, Message: "token may not write secret"},
			want:   verdict{action: chargeAttempt, attempts: 1, reason: "forbidden_model: token may not write secret"},
		},
		{
			name:     "a rejection below the budget charges one more",
			result:   syncproto.Result{OpID: op, Status: syncproto.StatusRejected, Code: syncproto.CodeInvalidKey, Message: "bad key"},
			attempts: 3,
			want:     verdict{action: chargeAttempt, attempts: 4, reason: "invalid_key: bad key"},
		},
		{
			name:     "the rejection that reaches the budget dead-letters with the reason",
			result:   syncproto.Result{OpID: op, Status: syncproto.StatusRejected, Code: syncproto.CodeForbiddenModel, Message: "token may not write secret"},
			attempts: 4,
			want: verdict{action: deadLetter, attempts: 5, reason: "forbidden_model: token may not write secret",
				outcome: Outcome{OpID: op, Status: StatusDeadLettered, Reason: "forbidden_model: token may not write secret", DecidedAt: now}},
		},
		{
			name:   "with a budget of one the first rejection dead-letters",
			result: syncproto.Result{OpID: op, Status: syncproto.StatusRejected, Code: syncproto.CodeOpIDReused, Message: "reused"},
			max:    1,
			want: verdict{action: deadLetter, attempts: 1, reason: "op_id_reused: reused",
				outcome: Outcome{OpID: op, Status: StatusDeadLettered, Reason: "op_id_reused: reused", DecidedAt: now}},
		},
		{
			name:     "a clock-skew refusal is re-stamped and charged nothing, even at the budget",
			result:   syncproto.Result{OpID: op, Status: syncproto.StatusRejected, Code: syncproto.CodeClockSkew, Message: "ahead"},
			attempts: 4,
			want:     verdict{action: restamp},
		},
		{
			name:   "expired dead-letters at once, uncharged",
			result: syncproto.Result{OpID: op, Status: syncproto.StatusExpired, Message: "older than the ledger"},
			want: verdict{action: deadLetter, reason: "expired: older than the ledger",
				outcome: Outcome{OpID: op, Status: StatusDeadLettered, Reason: "expired: older than the ledger", DecidedAt: now}},
		},
		{
			name:   "a status newer than the client is a refusal, never a success",
			result: syncproto.Result{OpID: op, Status: "deferred", Message: "later"},
			want:   verdict{action: chargeAttempt, attempts: 1, reason: "deferred: later"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			max := tt.max
			if max == 0 {
				max = DefaultMaxAttempts
			}
			require.Equal(t, tt.want, judge(&tt.result, tt.attempts, max, now))
		})
	}
}
