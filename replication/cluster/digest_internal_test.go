package cluster

import (
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/ledger"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// previousReleaseSampleDigest is chain([]byte("prev"), 7, sampleEffects(),
// 2) as the previous release (testdata/previous-release of cmd/syncd,
// 4ae6361) computes it, printed by that release's own chain.
const previousReleaseSampleDigest = "7f01ecea1bc074d4faedea8f453c527a2388126a9000d51168e44ae159f58e8b"

// TestDigestFormOfEffectsIsThePreviousRelease's: a node of this release
// chains the effects of a batch without scoped models exactly as a node
// of the previous release does, so a cluster of that release upgraded one
// node at a time keeps agreeing on its digests; the members partial sync
// added still count where they are set.
func TestDigestFormOfEffectsIsThePreviousRelease(t *testing.T) {
	fxs := sampleEffects()
	require.Equal(t, previousReleaseSampleDigest, hex.EncodeToString(chain([]byte("prev"), 7, fxs, 2)))

	scoped := sampleEffects()
	scoped[0].Entries[0].ScopeValue = "team-a"
	scoped[0].Entries[0].ScopeOld = "team-b"
	scoped[0].Entries[1].Member = "ann"
	scoped[0].Entries[1].Grants = []replication.GrantChange{{User: "ann", Scope: "teams", Value: "team-a", Held: true}}
	require.NotEqual(t, previousReleaseSampleDigest, hex.EncodeToString(chain([]byte("prev"), 7, scoped, 2)))
	for _, change := range []func(e *replication.Entry){
		func(e *replication.Entry) { e.ScopeOld = "team-b" },
		func(e *replication.Entry) { e.Member = "ann" },
		func(e *replication.Entry) {
			e.Grants = []replication.GrantChange{{User: "ann", Scope: "teams", Value: "team-a"}}
		},
	} {
		one := sampleEffects()
		change(&one[0].Entries[0])
		require.NotEqual(t, previousReleaseSampleDigest, hex.EncodeToString(chain([]byte("prev"), 7, one, 2)))
	}
}

// sampleEffects is one batch's effects built only of members that the
// release before partial sync already had: an applied put, a delete, a
// conflict and a superseded write, their ledger rows and a stale index.
func sampleEffects() []replication.Effects {
	at := time.UnixMilli(1_760_000_000_123).UTC()
	hlc := syncproto.Timestamp{Wall: 1_760_000_000_100, Logical: 3, Origin: "phone"}
	put := replication.NewEntry(replication.Record{Tenant: "acme", Model: "notes", Key: "k1", Value: json.RawMessage(`{"text":"tea"}`), Version: 2, HLC: hlc, OpID: "op-1"}, "phone")
	put.Seq, put.AppliedAt = 41, at
	del := replication.NewEntry(replication.Record{Tenant: "acme", Model: "notes", Key: "k2", Version: 5, HLC: hlc, OpID: "op-2", Deleted: true}, "phone")
	del.Seq, del.AppliedAt = 42, at
	return []replication.Effects{{
		Results: []syncproto.Result{
			{OpID: "op-1", Status: syncproto.StatusApplied, Version: 2, Seq: 41, HLC: hlc},
			{OpID: "op-2", Status: syncproto.StatusApplied, Version: 5, Seq: 42, HLC: hlc},
			{OpID: "op-3", Status: syncproto.StatusSuperseded, Message: "older", Winner: &syncproto.Winner{Version: 5, HLC: hlc, Deleted: true}},
		},
		Entries:   []replication.Entry{put, del},
		Conflicts: []replication.ConflictEntry{{Tenant: "acme", Model: "notes", Key: "k2", Policy: "lww", Reason: "older", DecidedAt: at}},
		Decisions: []ledger.Decision{{OpID: "op-1", Scope: "acme", OpTime: at, Digest: []byte{1, 2, 3}, Result: []byte(`{"status":"applied"}`), DecidedAt: at}},
		Stale:     []int{3},
	}, {}}
}
