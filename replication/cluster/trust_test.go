package cluster_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// publishRaw publishes data on the command subject as anyone who reaches
// NATS could, with auth as its authenticator header ("" for none), and
// returns its stream seq.
func publishRaw(t testing.TB, nc *nats.Conn, data []byte, auth string) uint64 {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	msg := &nats.Msg{Subject: cluster.Subject, Data: data, Header: nats.Header{}}
	if auth != "" {
		msg.Header.Set(cluster.HeaderAuth, auth)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ack, err := js.PublishMsg(ctx, msg)
	require.NoError(t, err)
	return ack.Sequence
}

func encode(t testing.TB, c cluster.Command) []byte {
	t.Helper()
	c.Version, c.ID = cluster.CommandVersion, uuid.NewString()
	data, err := json.Marshal(c)
	require.NoError(t, err)
	return data
}

func randomKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, cluster.MinCommandKeyBytes)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return k
}

// year9999 is the far future of a forger's clock.
var year9999 = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// forgery is one forged message and the reason every node refuses it for
// when it carries a valid authenticator ("" when a node would apply it: a
// node may write for any tenant, so only the authenticator keeps others
// from doing so).
type forgery struct {
	name      string
	data      []byte
	withValid string
}

// forgeries are the attack round's forged commands (issue 19).
func forgeries(t testing.TB) []forgery {
	t.Helper()
	intruder := syncproto.NewClock("intruder", nil)
	crossTenant := replication.Admit(replication.Author{Tenant: "victim", ClientID: "intruder", CanWrite: everything},
		[]syncproto.Mutation{put(intruder, "notes", "k", `"forged"`)}, testPolicies, time.Now(), time.Minute)

	// A batch stamped, and admitted, in year 9999: every honest rewrite
	// of its key would be superseded forever.
	future := syncproto.NewClock("intruder", func() time.Time { return year9999 })
	farBatch := replication.Admit(replication.Author{Tenant: "acme", ClientID: "intruder", CanWrite: everything},
		[]syncproto.Mutation{put(future, "notes", "k", `"forged"`)}, testPolicies, year9999, time.Minute)
	// The same write in a batch of today, its refusal struck out.
	farWrite := replication.Admit(replication.Author{Tenant: "acme", ClientID: "intruder", CanWrite: everything},
		[]syncproto.Mutation{put(future, "notes", "k", `"forged"`)}, testPolicies, time.Now(), time.Minute)
	farWrite.Writes[0].Refusal = nil
	// A write under another policy than its model's declaration.
	wrongPolicy := replication.Admit(replication.Author{Tenant: "acme", ClientID: "intruder", CanWrite: everything},
		[]syncproto.Mutation{put(intruder, "docs", "k", `"forged"`)}, nil, time.Now(), time.Minute)
	malformed := []byte(`{"v":1,"id":"x","batches":[{"te`) // 30 bytes

	return []forgery{
		{"cross-tenant write", encode(t, cluster.Command{Batches: []replication.Batch{crossTenant}}), ""},
		{"batch stamped in 9999", encode(t, cluster.Command{Batches: []replication.Batch{farBatch}}), cluster.RefusedFutureStamp},
		{"write stamped in 9999", encode(t, cluster.Command{Batches: []replication.Batch{farWrite}}), cluster.RefusedFutureStamp},
		{"write under another policy", encode(t, cluster.Command{Batches: []replication.Batch{wrongPolicy}}), cluster.RefusedInvalid},
		{"job with token 2^64-1", encode(t, cluster.Command{Job: &cluster.Job{Kind: cluster.JobPruneLedger, Token: math.MaxUint64, Now: time.Now(), Limit: 1000}}), cluster.RefusedJobToken},
		{"job as of 9999", encode(t, cluster.Command{Job: &cluster.Job{Kind: cluster.JobCompactOplog, Token: 1, Now: year9999, Limit: 1000}}), cluster.RefusedJobNow},
		{"malformed bytes", malformed, cluster.RefusedMalformed},
		{"a newer version", []byte(`{"v":2,"id":"from-the-future"}`), ""},
	}
}

// TestForgedCommandsAreRefusedAlike: each forged command of the attack
// round, published by a raw NATS client (with node credentials) without an authenticator, with
// one under another key, and (where the materializer can tell) with a
// valid one, is refused by every node the same way: the nodes keep
// serving, their digests stay equal, nothing of the forgeries is applied,
// and the next honest write applies.
func TestForgedCommandsAreRefusedAlike(t *testing.T) {
	servers, nodes := threeNodes(t, cluster.Options{CheckpointEvery: 5})
	clock := syncproto.NewClock("phone", nil)
	nodes[0].commit(t, batchOf("phone", put(clock, "notes", "k", `"honest"`)))
	raw := connect(t, servers[0])
	wrongKey := randomKey(t)

	want := map[string]int{}
	for _, f := range forgeries(t) {
		publishRaw(t, raw, f.data, "")
		publishRaw(t, raw, f.data, cluster.Authenticate(wrongKey, f.data))
		publishRaw(t, raw, f.data, cluster.AuthScheme+"00")
		want[cluster.RefusedUnauthenticated] += 3
		if f.withValid != "" {
			publishRaw(t, raw, f.data, cluster.Authenticate(testKey, f.data))
			want[f.withValid]++
		}
	}

	fx := nodes[1].commit(t, batchOf("phone", put(clock, "notes", "k", `"honest again"`)))
	require.Equal(t, syncproto.StatusApplied, fx.Results[0].Status, "the next honest write applies")
	waitApplied(t, nodes...)
	requireSameState(t, nodes...)
	for _, n := range nodes {
		st := n.cl.Status()
		require.True(t, st.Ready, "%s: %s", n.name, st.Problem)
		require.Equal(t, nodes[0].cl.Status().Digest, st.Digest, "%s: the digest covers the skips alike", n.name)
		for reason, count := range want {
			require.Equal(t, float64(count), n.metric(t, "syncd_cluster_commands_refused_total", "reason", reason), "%s: refused %s", n.name, reason)
		}
		var victims int
		require.NoError(t, n.db.QueryRow(`SELECT count(*) FROM records WHERE tenant = 'victim' OR value LIKE '%forged%'`).Scan(&victims))
		require.Zero(t, victims, "%s: nothing forged applied", n.name)
	}
}

// TestStreamDriftAndDeletionAreNamed: a change of the command stream's
// settings behind syncd's back (here: keep one message) is named by the
// next report and the node stops serving until the setting is restored; a
// deleted stream is named as such, not as a wait for quorum.
func TestStreamDriftAndDeletionAreNamed(t *testing.T) {
	servers := syncdtest.StartNATS(t, 1, testSecret)
	n := startNode(t, servers[0], "node-1", filepath.Join(t.TempDir(), "syncd.db"), cluster.Options{JobInterval: time.Hour})
	writeMany(t, n, "phone", 2)
	js, err := jetstream.New(connect(t, servers[0]))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, err := js.Stream(ctx, cluster.StreamName)
	require.NoError(t, err)
	good := s.CachedInfo().Config

	drifted := good
	drifted.MaxMsgs = 1
	_, err = js.UpdateStream(ctx, drifted)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return n.cl.Ready() != nil }, waitFor, 20*time.Millisecond)
	require.ErrorIs(t, n.cl.Ready(), cluster.ErrMisconfigured)
	require.ErrorContains(t, n.cl.Ready(), "max messages 1")
	require.Equal(t, 1.0, n.metric(t, "syncd_cluster_misconfigured", "", ""))

	_, err = js.UpdateStream(ctx, good)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return n.cl.Ready() == nil }, waitFor, 20*time.Millisecond, "serves again once the setting is back")
	require.Equal(t, 0.0, n.metric(t, "syncd_cluster_misconfigured", "", ""))

	require.NoError(t, js.DeleteStream(ctx, cluster.StreamName))
	require.Eventually(t, func() bool { return errors.Is(n.cl.Ready(), cluster.ErrStreamDeleted) }, waitFor, 20*time.Millisecond,
		"named by the next report")
	require.NotContains(t, n.cl.Ready().Error(), "waiting for")
}

// TestNodesAgreeOnConfiguration: a node whose token file missed a
// revocation the others have, and whose model declarations differ, stops
// serving naming both, and takes no write; once its file is fixed only the
// models are named; its peers serve on.
func TestNodesAgreeOnConfiguration(t *testing.T) {
	servers := syncdtest.StartNATS(t, 3, testSecret)
	dir := t.TempDir()
	files := make([]string, 3)
	var nodes []*node
	for i, ns := range servers {
		files[i] = filepath.Join(dir, fmt.Sprintf("tokens-%d.json", i+1))
		require.NoError(t, os.WriteFile(files[i], []byte(`{"tokens":[]}`), 0o600))
		o := cluster.Options{Replicas: 3, Agreement: tokenAgreement(files[i])}
		if i == 2 {
			o.Policies = replication.Config{"docs": syncproto.PolicyLWW}
			require.NoError(t, os.WriteFile(files[i], []byte(`{"tokens":[{"revoked":"not here"}]}`), 0o600))
		}
		nodes = append(nodes, startNode(t, ns, fmt.Sprintf("node-%d", i+1), filepath.Join(t.TempDir(), "syncd.db"), o))
	}
	var mismatch *cluster.MismatchError
	require.Eventually(t, func() bool { return errors.As(nodes[2].cl.Ready(), &mismatch) }, waitFor, 50*time.Millisecond)
	require.Equal(t, []string{cluster.PartModels, "tokens"}, mismatch.Parts)
	require.ErrorIs(t, nodes[2].cl.Ready(), cluster.ErrConfigMismatch)
	require.Equal(t, 1.0, nodes[2].metric(t, "syncd_cluster_config_mismatch", "", ""))
	for _, n := range nodes[:2] {
		requireServing(t, n)
	}
	clock := syncproto.NewClock("phone", nil)
	_, err := nodes[2].tryCommit(batchOf("phone", put(clock, "notes", "k", `"through the stale node"`)))
	require.ErrorIs(t, err, cluster.ErrConfigMismatch, "a token the others revoked does not write through it")
	require.ErrorIs(t, err, cluster.ErrNotServing, "which a device is told is server_busy")
	nodes[0].commit(t, batchOf("phone", put(clock, "notes", "k", `"through a current node"`)))

	require.NoError(t, os.WriteFile(files[2], []byte(`{"tokens":[]}`), 0o600))
	require.Eventually(t, func() bool {
		return errors.As(nodes[2].cl.Ready(), &mismatch) && len(mismatch.Parts) == 1
	}, waitFor, 50*time.Millisecond)
	require.Equal(t, []string{cluster.PartModels}, mismatch.Parts)
	for _, n := range nodes[:2] {
		requireServing(t, n)
	}
}

func tokenAgreement(path string) func() map[string]string {
	return func() map[string]string {
		data, err := os.ReadFile(path)
		if err != nil {
			data = []byte(err.Error())
		}
		return map[string]string{"tokens": cluster.HashPart(data)}
	}
}

// TestForgedSnapshotIsRefused: a snapshot uploaded with the right
// metadata but without the cluster key's authenticator (an edited copy of
// a node's database) is refused by a node restoring onto an empty disk,
// which does not start; nothing is restored.
func TestForgedSnapshotIsRefused(t *testing.T) {
	servers := syncdtest.StartNATS(t, 1, testSecret)
	o := cluster.Options{StreamMaxBytes: 64 << 10, SnapshotEvery: time.Hour, JobInterval: time.Hour}
	a := startNode(t, servers[0], "node-a", filepath.Join(t.TempDir(), "syncd.db"), o)
	writeMany(t, a, "laptop", 400)

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	forged := filepath.Join(t.TempDir(), "forged.db")
	_, err := a.db.ExecContext(ctx, `VACUUM INTO ?`, forged)
	require.NoError(t, err)
	db, err := sql.Open("sqlite3", forged)
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE records SET value = CAST('"forged"' AS BLOB)`)
	require.NoError(t, err)
	var applied uint64
	require.NoError(t, db.QueryRow(`SELECT value FROM syncd_meta WHERE name = 'cluster_applied_seq'`).Scan(&applied))
	require.NoError(t, db.Close())

	js, err := jetstream.New(connect(t, servers[0]))
	require.NoError(t, err)
	objects, err := js.ObjectStore(ctx, cluster.SnapshotBucket)
	require.NoError(t, err)
	for _, auth := range []string{"", cluster.Authenticate(randomKey(t), []byte("x"))} {
		f, err := os.Open(forged)
		require.NoError(t, err)
		meta := map[string]string{"applied_seq": strconv.FormatUint(applied, 10), "cluster_id": a.cl.ID()}
		if auth != "" {
			meta["syncd.auth"] = auth
		}
		_, err = objects.Put(ctx, jetstream.ObjectMeta{Name: "state.db", Metadata: meta}, f)
		f.Close()
		require.NoError(t, err)

		o.Node, o.Replicas, o.CommandKey = "node-b", 1, testKey
		cl, err := cluster.Connect(ctx, connect(t, servers[0]), o)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "syncd.db")
		_, err = cl.PrepareData(ctx, path)
		require.ErrorIs(t, err, cluster.ErrSnapshotUnverified)
		_, statErr := os.Stat(path)
		require.ErrorIs(t, statErr, os.ErrNotExist, "nothing restored")
	}
}

// TestAuthenticatedNewerVersionWaitsForUpgrade: a command of a newer
// version, a job of a kind this release does not know, or a job of a
// later format than the node announces, that carries a valid
// authenticator is a newer node's: skipping it would diverge from
// the nodes that apply it, so the node waits there, not serving, saying
// to upgrade it, without failing. The same bytes unauthenticated were
// skipped (TestForgedCommandsAreRefusedAlike).
func TestAuthenticatedNewerVersionWaitsForUpgrade(t *testing.T) {
	older := cluster.Options{JobInterval: time.Hour, Format: cluster.FormatBase}
	for i, c := range []struct {
		data []byte
		o    cluster.Options
	}{
		{[]byte(`{"v":2,"id":"from-a-newer-node"}`), cluster.Options{JobInterval: time.Hour}},
		{[]byte(`{"v":1,"id":"a-newer-job","job":{"kind":"rebalance","token":0,"now":"2026-01-01T00:00:00Z","limit":1}}`), cluster.Options{JobInterval: time.Hour}},
		// A node of the release before records checks, in a cluster that
		// moved on without it.
		{[]byte(`{"v":1,"id":"a-records-check","job":{"kind":"check_records","token":0,"now":"2026-01-01T00:00:00Z","limit":1}}`), older},
	} {
		data := c.data
		servers := syncdtest.StartNATS(t, 1, testSecret) // a stream of its own
		n := startNode(t, servers[0], fmt.Sprintf("node-%d", i+1), filepath.Join(t.TempDir(), "syncd.db"), c.o)
		writeMany(t, n, "phone", 1)
		at := publishRaw(t, n.nc, data, cluster.Authenticate(testKey, data))
		require.Eventually(t, func() bool { return n.cl.Ready() != nil }, waitFor, 20*time.Millisecond)
		require.ErrorIs(t, n.cl.Ready(), cluster.ErrNeedsUpgrade)
		require.ErrorContains(t, n.cl.Ready(), "upgrade it")
		require.ErrorIs(t, n.cl.Refuses(), cluster.ErrNeedsUpgrade, "it does not serve")
		require.Equal(t, 1.0, n.metric(t, "syncd_cluster_waiting_for_upgrade", "", ""))
		require.Equal(t, 0.0, n.metric(t, "syncd_cluster_node_failed", "", ""), "it waits, it has not failed")
		require.Less(t, n.cl.Status().AppliedSeq, at, "it neither applied nor skipped the command")
		n.stop()
	}
}

// TestOptionsNameWhatIsMissing: a node without a command key of at least
// MinCommandKeyBytes, or with retention switched off, is refused before it
// touches NATS, the error naming the field.
func TestOptionsNameWhatIsMissing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	nc := connect(t, syncdtest.StartNATS(t, 1, testSecret)[0])
	_, err := cluster.Connect(ctx, nc, cluster.Options{Node: "node-1", Replicas: 1})
	require.ErrorContains(t, err, "CommandKey: 0 bytes, want at least 32")
	_, err = cluster.Connect(ctx, nc, cluster.Options{Node: "node-1", Replicas: 1, CommandKey: testKey[:31]})
	require.ErrorContains(t, err, "CommandKey: 31 bytes")
	_, err = cluster.Connect(ctx, nc, cluster.Options{Node: "node-1", Replicas: 1, CommandKey: testKey, JobInterval: -time.Second})
	require.ErrorContains(t, err, "--retention-interval")
}
