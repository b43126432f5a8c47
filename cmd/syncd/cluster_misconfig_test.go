package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
)

// runSyncdToExit runs syncd (syncdBinary) with args to its exit, bounded,
// and returns its exit code and output.
func runSyncdToExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), procStartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, syncdBinary(t), args...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), string(out)
	}
	require.NoError(t, err, "syncd %v ran: %s", args, out)
	return 0, string(out)
}

// externalNATS starts a NATS server with JetStream in the test process,
// as an operator's external NATS, whose user is the node user of secret.
func externalNATS(t *testing.T, secret cluster.Secret, maxPayload int32) *natsserver.Server {
	t.Helper()
	ns, err := cluster.StartEmbedded(cluster.EmbeddedOptions{Name: "ext", Port: -1, StoreDir: t.TempDir(), MaxPayload: maxPayload, Secret: secret})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

// streamState reads the command stream through ns as the node user of
// secret.
func streamState(t *testing.T, ns *natsserver.Server, secret cluster.Secret) *jetstream.StreamInfo {
	t.Helper()
	nc, err := cluster.ConnectEmbedded(ns, secret)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, cluster.StreamName)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	return info
}

// TestClusterProcessMisconfiguration starts syncd processes on a wrong
// configuration: each exits with status 1 and an error that names the
// fix, and changes nothing (the stream keeps its settings and messages,
// the node's data stays).
func TestClusterProcessMisconfiguration(t *testing.T) {
	waitsInParallel(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	_, err := auth.Issue(tokens, auth.Principal{Admin: true}, time.Now())
	require.NoError(t, err)
	secret, secretFile := newSecretFile(t)
	password := writePrivateFile(t, "nats-password", secret.NodePassword())
	// ext is the flags of a node on the external NATS at url.
	ext := func(url string) []string {
		return []string{"--nats-url", url, "--nats-user", cluster.NodeUser, "--nats-password-file", password}
	}
	node := func(name string, extra ...string) []string {
		return append([]string{"--cluster", "--node-id", name, "--data", filepath.Join(dir, name, "syncd.db"), "--tokens", tokens, "--cluster-secret", secretFile,
			"--listen", syncdtest.FreeAddr(t), "--admin-listen", syncdtest.FreeAddr(t), "--cluster-start-timeout", "5s"}, extra...)
	}

	t.Run("NATS unreachable", func(t *testing.T) {
		code, out := runSyncdToExit(t, node("a", ext("nats://"+syncdtest.FreeAddr(t))...)...)
		require.Equal(t, 1, code, out)
		require.Contains(t, out, "is the NATS cluster running, and --nats-url and its credentials right?")
	})
	t.Run("routes unreachable", func(t *testing.T) {
		code, out := runSyncdToExit(t, node("b", "--nats-listen", syncdtest.FreeAddr(t), "--nats-cluster-listen", syncdtest.FreeAddr(t),
			"--nats-route", "nats-route://"+syncdtest.FreeAddr(t), "--nats-route", "nats-route://"+syncdtest.FreeAddr(t))...)
		require.Equal(t, 1, code, out)
		require.Contains(t, out, "waiting for cluster quorum")
		require.Contains(t, out, "their NATS routes reachable: --nats-route")
	})
	t.Run("message size limit", func(t *testing.T) {
		ns := externalNATS(t, secret, 1<<20)
		code, out := runSyncdToExit(t, node("c", append(ext(ns.ClientURL()), "--replicas", "1")...)...)
		require.Equal(t, 1, code, out)
		require.Contains(t, out, "set max_payload to at least")
	})

	// One external NATS whose stream a first node creates (R1).
	ns := externalNATS(t, secret, 0)
	first := &procNode{name: "d", logPath: filepath.Join(dir, "d.log")}
	first.args = node("d", append(ext(ns.ClientURL()), "--replicas", "1")...)
	for i, a := range first.args {
		if a == "--listen" {
			first.url = "http://" + first.args[i+1]
		}
	}
	t.Cleanup(func() { first.kill(t) })
	first.start(t)
	first.waitReady(t)
	first.kill(t)
	before := streamState(t, ns, secret)

	t.Run("stream with other settings", func(t *testing.T) {
		code, out := runSyncdToExit(t, node("e", append(ext(ns.ClientURL()), "--replicas", "3")...)...)
		require.Equal(t, 1, code, out)
		require.Contains(t, out, "1 replicas, this node is configured for 3")
	})
	t.Run("another cluster's stream", func(t *testing.T) {
		other := externalNATS(t, secret, 0)
		// Node d's data belongs to the first cluster; other's stream is new.
		code, out := runSyncdToExit(t, node("d", append(ext(other.ClientURL()), "--replicas", "1")...)...)
		require.Equal(t, 1, code, out)
		require.Contains(t, out, "belongs to another cluster")
		require.Contains(t, out, "or move the data file aside")
		require.FileExists(t, filepath.Join(dir, "d", "syncd.db"), "the node's data is kept")
	})
	after := streamState(t, ns, secret)
	require.Equal(t, before.Config.Replicas, after.Config.Replicas, "the refused node changed nothing")
	require.Equal(t, before.Config.Metadata, after.Config.Metadata)
	require.Equal(t, before.State.Msgs, after.State.Msgs, "no message lost")
}
