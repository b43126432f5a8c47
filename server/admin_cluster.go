package server

import (
	"errors"
	"net/http"
	"slices"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/replication/cluster"
)

// adminCluster answers a cluster node's messaging: its NATS servers and
// the command stream's leader and replicas.
func (s *Server) adminCluster(r *http.Request) (any, int, error) {
	c := s.cfg.Cluster
	if c == nil {
		return nil, http.StatusConflict, errors.New("a single node has no cluster (syncd --cluster)")
	}
	in := c.Infra(r.Context())
	out := adminapi.ClusterInfra{Node: c.Status().Node, StreamLeader: in.StreamLeader, StreamError: in.StreamError, Servers: []adminapi.NATSServer{}}
	for _, sv := range in.Servers {
		out.Servers = append(out.Servers, adminapi.NATSServer{URL: sv.URL, Connected: sv.Connected})
	}
	for _, rp := range in.Replicas {
		out.Replicas = append(out.Replicas, adminapi.StreamReplica{Name: rp.Name, Current: rp.Current, Offline: rp.Offline, ActiveSeconds: rp.Active.Seconds(), Lag: rp.Lag})
	}
	return out, 0, nil
}

// adminCheck is a digest check as the admin API shows it.
func adminCheck(c *cluster.Check) *adminapi.Check {
	if c == nil {
		return nil
	}
	return &adminapi.Check{At: c.At, Seq: c.Seq, Result: c.Result, Agree: slices.Clone(c.Agree), Disagree: slices.Clone(c.Disagree)}
}
