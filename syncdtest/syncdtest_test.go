package syncdtest_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
)

func TestStartServesAndRestarts(t *testing.T) {
	s := syncdtest.Start(t, server.Config{})
	require.Equal(t, http.StatusOK, syncdtest.GetJSON(t, s.URL+"/readyz", "", nil))
	require.Empty(t, s.Oplog(t, ""))
	token := s.Member(t, "acme", "phone")
	require.Equal(t, http.StatusOK, syncdtest.GetJSON(t, s.URL+"/v1/snapshot", token, nil))
	s.Restart(t)
	require.Equal(t, http.StatusOK, syncdtest.GetJSON(t, s.URL+"/readyz", "", nil))
	require.Equal(t, "syncd-1", s.Status(t).NodeID)
}

func TestStartClusterNodesShareTokensAndState(t *testing.T) {
	nodes := syncdtest.StartCluster(t, 3, server.Config{})
	token := nodes[0].Member(t, "acme", "phone")
	for i, n := range nodes {
		require.Equal(t, http.StatusOK, syncdtest.GetJSON(t, n.URL+"/v1/snapshot", token, nil), "node %d", i+1)
		st := n.Status(t)
		require.NotNil(t, st.Cluster)
		require.Equal(t, nodes[0].Status(t).Cluster.ID, st.Cluster.ID)
	}
	nodes[1].Restart(t)
	require.Equal(t, http.StatusOK, syncdtest.GetJSON(t, nodes[1].URL+"/readyz", "", nil))
}
