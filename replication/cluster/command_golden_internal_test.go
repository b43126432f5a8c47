package cluster

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// goldenCommands are representative commands: push batches with every
// field a write carries (a refusal, each policy, a hook answer with and
// without a fallback, base and seen versions, a delete), and each job.
func goldenCommands() map[string]Command {
	at := time.Date(2026, 12, 4, 10, 30, 0, 123_000_000, time.UTC)
	u64 := func(v uint64) *uint64 { return &v }
	hlc := func(ms int64, logical uint32, origin string) syncproto.Timestamp {
		return syncproto.Timestamp{Wall: ms, Logical: logical, Origin: origin}
	}
	batches := Command{
		ID: "edge-1/42",
		Batches: []replication.Batch{
			{
				Tenant: "acme", ClientID: "phone-1", At: at,
				Writes: []replication.Write{
					{
						Mutation: syncproto.Mutation{OpID: "0193a5c2-7f00-7000-8000-000000000001", Model: "todos", Key: "t/1", Op: syncproto.OpPut,
							Value: json.RawMessage(`{"title":"milk <&>","done":false}`), HLC: hlc(1733140000000, 0, "phone-1")},
						Policy: syncproto.PolicyLWW,
					},
					{
						Mutation: syncproto.Mutation{OpID: "0193a5c2-7f00-7000-8000-000000000002", Model: "docs", Key: "readme", Op: syncproto.OpPut,
							Value: json.RawMessage(`"v2"`), HLC: hlc(1733140000000, 1, "phone-1"), BaseVersion: u64(3)},
						Policy: syncproto.PolicyOptimistic,
					},
					{
						Mutation: syncproto.Mutation{OpID: "0193a5c2-7f00-7000-8000-000000000003", Model: "todos", Key: "t/2", Op: syncproto.OpDelete,
							HLC: hlc(1733140000000, 2, "phone-1"), SeenVersion: u64(7)},
						Policy: syncproto.PolicyLWW,
					},
					{
						Mutation: syncproto.Mutation{OpID: "0193a5c2-7f00-7000-8000-000000000004", Model: "secret", Key: "k", Op: syncproto.OpPut,
							Value: json.RawMessage(`1`), HLC: hlc(1733140000000, 3, "phone-1")},
						Refusal: syncproto.Errorf(syncproto.CodeForbiddenModel, "this token may not write model %s", "secret"),
						Policy:  syncproto.PolicyLWW,
					},
				},
			},
			{
				Tenant: "acme", ClientID: "laptop-2", At: at.Add(time.Millisecond),
				Writes: []replication.Write{
					{
						Mutation: syncproto.Mutation{OpID: "0193a5c2-7f00-7000-8000-000000000005", Model: "notes", Key: "n/1", Op: syncproto.OpPut,
							Value: json.RawMessage(`{"body":"merged"}`), HLC: hlc(1733140000001, 0, "laptop-2")},
						Policy: syncproto.PolicyHook,
						Hook:   &replication.HookAnswer{Version: 4, Result: replication.Merge([]byte(`{"body":"a+b"}`))},
					},
					{
						Mutation: syncproto.Mutation{OpID: "0193a5c2-7f00-7000-8000-000000000006", Model: "notes", Key: "n/2", Op: syncproto.OpPut,
							Value: json.RawMessage(`{"body":"x"}`), HLC: hlc(1733140000001, 1, "laptop-2")},
						Policy: syncproto.PolicyHook,
						Hook:   &replication.HookAnswer{Version: 0, Result: replication.Reject("no"), Fallback: replication.FallbackTimeout},
					},
				},
			},
		},
	}
	cmds := map[string]Command{"command_batches": batches}
	for _, kind := range []JobKind{JobCompactOplog, JobPruneLedger, JobPruneConflicts} {
		cmds["command_job_"+string(kind)] = Command{ID: "lease-holder/7", Job: &Job{Kind: kind, Token: 19, Now: at, Limit: 1000}}
	}
	return cmds
}

// TestCommandEncodingGolden pins the bytes of the command stream: every
// node of a cluster, of this release and the next, must read what the
// others wrote. Each command encodes to exactly its testdata file, and
// decoding that file and encoding it again gives the same bytes. Run with
// -update to rewrite the files after a deliberate, versioned change.
func TestCommandEncodingGolden(t *testing.T) {
	for name, cmd := range goldenCommands() {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join("testdata", name+".json")
			got, err := encodeCommand(cmd)
			require.NoError(t, err)
			if *update {
				require.NoError(t, os.WriteFile(file, append(got, '\n'), 0o644))
			}
			want, err := os.ReadFile(file)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got)+"\n")

			var decoded Command
			require.NoError(t, json.Unmarshal(want, &decoded))
			again, err := encodeCommand(decoded)
			require.NoError(t, err)
			require.Equal(t, string(got), string(again))
		})
	}
}
