package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// upgradable is a real syncd whose value versions change between
// restarts over the same database, tokens and address, as an operator's
// rolling release does.
type upgradable struct {
	*syncd
}

func startUpgradable(t *testing.T, versions map[string]server.ModelVersions) *upgradable {
	t.Helper()
	return &upgradable{startSyncd(t, server.Config{ValueVersions: versions})}
}

// restartWith stops the server and starts it again on the same address
// and database, accepting versions.
func (u *upgradable) restartWith(t *testing.T, versions map[string]server.ModelVersions) {
	t.Helper()
	addr, err := url.Parse(u.URL)
	require.NoError(t, err)
	u.Stop(t)
	a, err := auth.NewAuthenticator(u.TokenPath, nil)
	require.NoError(t, err)
	next := syncdtest.StartAt(t, addr.Host, server.Config{DataPath: u.DataPath, Authenticator: a, ValueVersions: versions})
	next.TokenPath, next.AdminToken = u.TokenPath, u.AdminToken
	u.syncd = &syncd{next}
}

var (
	notesV1     = map[string]server.ModelVersions{"notes": {Current: 1}}
	notesV2Only = map[string]server.ModelVersions{"notes": {Current: 2}}
	// notesV2 upcasts notes of version 1 ({"title"}) to version 2
	// ({"name"}), declared as the binary's flags declare it.
	notesV2 = func() map[string]server.ModelVersions {
		var d server.ValueVersionDecls
		if d.SetCurrent("notes=2") != nil || d.SetUpcast("notes@1=rename:title:name") != nil {
			panic("notes version 2 declaration")
		}
		return d
	}()
)

func withVersions(vs map[string]uint64) deviceOptions {
	return deviceOptions{tweak: func(c *client.Config) { c.ModelVersions = vs }}
}

// Writes queued at value version 1 while offline reach a server moved to
// version 2 with an upcaster: they are applied in the new shape, and the
// device's replica holds the new shape too.
func TestOfflineWritesOfAnOldVersionAreUpcast(t *testing.T) {
	s := startUpgradable(t, notesV1)
	d := openDevice(t, s.syncd, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{})
	d.waitSynced(t)
	d.offline()
	d.waitOffline(t)
	ops := []string{d.put(t, "notes", "a", `{"title":"milk"}`), d.put(t, "notes", "b", `{"title":"eggs"}`)}

	s.restartWith(t, notesV2)
	d.online()
	d.requireApplied(t, ops)
	recs := s.serverRecords(t, d.token, "notes")
	require.JSONEq(t, `{"name":"milk"}`, string(recs["a"].Value))
	require.JSONEq(t, `{"name":"eggs"}`, string(recs["b"].Value))
	d.waitStatus(t, "replica in the new shape", func(client.Status) bool { return d.convergesWithServer(t, s.syncd, "notes") })
	require.Equal(t, 2.0, s.MetricValue(t, "syncd_upcasts_total"))
	require.Empty(t, d.status(t).Paused)
}

// A write of a version the server does not accept (an old device after
// the server dropped its upcaster, or a device newer than the server) is
// answered needs_upgrade: that model pauses with its writes queued in
// order, the other models keep syncing, nothing is dead-lettered; once the
// server accepts the version the model resumes by itself, in order.
func TestWritesOfAVersionNotAcceptedPauseThenResume(t *testing.T) {
	for _, tc := range []struct {
		name          string
		device        map[string]uint64
		before, after map[string]server.ModelVersions
		accepted      []uint64
		want          string // the value applied for {"title":"x"}
	}{
		{"device older than the server", nil, notesV2Only, notesV2, []uint64{2}, `{"name":"x0"}`},
		{"device newer than the server", map[string]uint64{"notes": 2}, notesV1, notesV2, []uint64{1}, `{"title":"x0"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startUpgradable(t, tc.before)
			d := openDevice(t, s.syncd, s.proxy(t), t.TempDir(), "phone-1", withVersions(tc.device))
			var notes []string
			for i := range 3 {
				notes = append(notes, d.put(t, "notes", fmt.Sprint("n", i), fmt.Sprintf(`{"title":"x%d"}`, i)))
			}
			todo := d.put(t, "todos", "t", `{"done":false}`)
			d.requireApplied(t, []string{todo})

			d.waitStatus(t, "notes paused", func(st client.Status) bool { return len(st.Paused) == 1 })
			st := d.status(t)
			wantVersion := max(uint64(1), tc.device["notes"])
			require.Equal(t, client.PausedModel{Model: "notes", Version: wantVersion, Code: syncproto.CodeNeedsUpgrade, Accepted: tc.accepted}, st.Paused[0])
			require.Equal(t, 0, st.DeadLetters)
			pending, err := d.Pending(t.Context())
			require.NoError(t, err)
			require.Equal(t, map[string]int{"notes": 3}, pending)
			require.GreaterOrEqual(t, s.MetricValue(t, `syncd_value_version_refusals_total{code="needs_upgrade"}`), 1.0)

			// Other models keep syncing while notes waits.
			d.requireApplied(t, []string{d.put(t, "todos", "u", `{"done":true}`)})
			short, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			require.ErrorIs(t, d.Drain(short), context.DeadlineExceeded, "Drain waits for the paused writes")

			s.restartWith(t, tc.after)
			require.NoError(t, d.Drain(t.Context()))
			d.requireApplied(t, notes)
			var seqs []uint64
			for _, op := range notes {
				seqs = append(seqs, d.await(t, op).Seq)
			}
			require.IsIncreasing(t, seqs, "applied in the order written")
			require.JSONEq(t, tc.want, string(s.serverRecords(t, d.token, "notes")["n0"].Value))
			d.waitStatus(t, "resumed", func(st client.Status) bool { return st.Paused == nil && st.Pending == 0 && st.DeadLetters == 0 })
		})
	}
}

// An upcaster that fails, panics or returns an invalid value refuses the
// write upcast_failed, logged and counted; the device keeps it queued with
// its model paused, and the server's committer and the other models' writes
// go on.
func TestUpcasterFailuresRefuseTheWriteAlone(t *testing.T) {
	for name, up := range map[string]server.Upcaster{
		"error":    func(json.RawMessage) (json.RawMessage, error) { return nil, errors.New("no title") },
		"panic":    func(json.RawMessage) (json.RawMessage, error) { panic("upcaster bug") },
		"not JSON": func(json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{"name":`), nil },
		"too large": func(json.RawMessage) (json.RawMessage, error) {
			return bytes.Repeat([]byte("1"), syncproto.MaxPayloadBytes+1), nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := startUpgradable(t, map[string]server.ModelVersions{"notes": {Current: 2, Upcasters: map[uint64]server.Upcaster{1: up}}})
			d := openDevice(t, s.syncd, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{})
			note := d.put(t, "notes", "a", `{"title":"x"}`)
			d.requireApplied(t, []string{d.put(t, "todos", "t", `{"done":false}`)})
			d.waitStatus(t, "notes paused", func(st client.Status) bool { return len(st.Paused) == 1 })
			st := d.status(t)
			require.Equal(t, syncproto.CodeUpcastFailed, st.Paused[0].Code)
			require.Equal(t, 1, st.Pending)
			require.Equal(t, 0, st.DeadLetters)
			_, found, err := d.Lookup(t.Context(), note)
			require.NoError(t, err)
			require.False(t, found, "no outcome: the write waits")
			require.Equal(t, 1.0, s.MetricValue(t, `syncd_value_version_refusals_total{code="upcast_failed"}`))
			// The committer goes on: another device's writes apply.
			e := openDevice(t, s.syncd, s.proxy(t), t.TempDir(), "phone-2", withVersions(map[string]uint64{"notes": 2}))
			e.requireApplied(t, []string{e.put(t, "notes", "b", `{"name":"y"}`)})
		})
	}
}

// A build never moves a model's value version backwards: Open refuses a
// declaration below the one an earlier Open of the same replica made.
func TestDeclaredVersionGoingBackwardsIsRefused(t *testing.T) {
	s := startSyncd(t, server.Config{})
	dir := t.TempDir()
	d := openDevice(t, s, s.proxy(t), dir, "phone-1", withVersions(map[string]uint64{"notes": 3}))
	require.NoError(t, d.Close())

	q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	_, err = client.Open(t.Context(), client.Config{ServerURLs: []string{s.URL}, Token: d.token, ClientID: "phone-1",
		Queue: q, ReplicaPath: filepath.Join(dir, "replica.db"), ModelVersions: map[string]uint64{"notes": 2}})
	var back *client.VersionBackwardsError
	require.ErrorAs(t, err, &back)
	require.Equal(t, client.VersionBackwardsError{Model: "notes", Declared: 2, Recorded: 3}, *back)

	_, err = client.Open(t.Context(), client.Config{ServerURLs: []string{s.URL}, Token: d.token, ClientID: "phone-1",
		Queue: q, ReplicaPath: filepath.Join(dir, "replica.db"), ModelVersions: map[string]uint64{"notes": 0}})
	require.ErrorContains(t, err, "ModelVersions[notes] = 0")
}
