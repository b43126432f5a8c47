package server

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDebugSnapshotIsCappedByDroppingTheNewestSessions: a snapshot whose
// encoding exceeds the cap keeps the longest-connected sessions that fit
// and says it was truncated.
func TestDebugSnapshotIsCappedByDroppingTheNewestSessions(t *testing.T) {
	snap := &DebugSnapshot{}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 20000 {
		snap.Sessions = append(snap.Sessions, DebugSession{Tenant: "acme", ClientID: fmt.Sprintf("device-%05d", i), Since: t0.Add(time.Duration(i) * time.Second)})
	}
	snap.SessionsTotal = len(snap.Sessions)
	body, err := encodeDebugSnapshot(snap, MaxDebugSnapshotBytes)
	require.NoError(t, err)
	require.LessOrEqual(t, len(body), MaxDebugSnapshotBytes)
	var got DebugSnapshot
	require.NoError(t, json.Unmarshal(body, &got))
	require.True(t, got.SessionsTruncated)
	require.Equal(t, 20000, got.SessionsTotal)
	require.NotEmpty(t, got.Sessions)
	require.Less(t, len(got.Sessions), 20000)
	require.Equal(t, "device-00000", got.Sessions[0].ClientID, "the longest-connected are kept")

	small := &DebugSnapshot{Sessions: snap.Sessions[:3], SessionsTotal: 3}
	body, err = encodeDebugSnapshot(small, MaxDebugSnapshotBytes)
	require.NoError(t, err)
	var whole DebugSnapshot
	require.NoError(t, json.Unmarshal(body, &whole))
	require.False(t, whole.SessionsTruncated)
	require.Len(t, whole.Sessions, 3)
}
