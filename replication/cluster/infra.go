package cluster

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Check is the last comparison of this node's digest with its peers' at
// one stream seq: a digest check (every checkpoint), or a records check
// (a checkpoint whose digest covers record contents).
type Check struct {
	At  time.Time `json:"at"`
	Seq uint64    `json:"seq"`
	// Result is "match" when every peer that reported at Seq agrees with
	// this node, "mismatch" when one disagrees.
	Result   string   `json:"result"`
	Agree    []string `json:"agree,omitempty"`
	Disagree []string `json:"disagree,omitempty"`
}

// noteCheck keeps v as the last digest check and, at a records check, the
// last records check, when it compared this node's digest with a peer's.
func (c *Cluster) noteCheck(v verdict) {
	if !v.mine || len(v.agree)+len(v.disagree) == 0 {
		return
	}
	ck := &Check{At: c.opts.Now().UTC(), Seq: v.seq, Result: "match", Agree: slices.Clone(v.agree), Disagree: slices.Clone(v.disagree)}
	if len(v.disagree) > 0 {
		ck.Result = "mismatch"
	}
	c.lastDigestCheck.Store(ck)
	if v.records {
		c.lastRecordsCheck.Store(ck)
	}
}

// Infra is the messaging this node runs on, as it sees it now: the NATS
// servers its connection knows and the command stream's replicas.
type Infra struct {
	// Servers are the NATS servers the node's connection knows (those it
	// was given and those it discovered), credentials removed.
	Servers []NATSServer `json:"servers"`
	// StreamLeader is the server leading the command stream ("" when the
	// stream has none, or did not answer: StreamError says why).
	StreamLeader string          `json:"stream_leader"`
	Replicas     []StreamReplica `json:"replicas,omitempty"`
	StreamError  string          `json:"stream_error,omitempty"`
}

// NATSServer is one NATS server URL; Connected is true for the one the
// node's connection is on.
type NATSServer struct {
	URL       string `json:"url"`
	Connected bool   `json:"connected"`
}

// StreamReplica is one follower of the command stream, as its leader
// reports it.
type StreamReplica struct {
	Name    string        `json:"name"`
	Current bool          `json:"current"`
	Offline bool          `json:"offline"`
	Active  time.Duration `json:"active"`
	Lag     uint64        `json:"lag"`
}

// Infra asks the node's NATS connection for its servers and the stream
// for its leader and replicas (one JetStream request, bounded by
// Options.APITimeout).
func (c *Cluster) Infra(ctx context.Context) Infra {
	var in Infra
	connected := redact(c.nc.ConnectedUrl())
	for _, s := range c.nc.Servers() {
		u := redact(s)
		in.Servers = append(in.Servers, NATSServer{URL: u, Connected: c.nc.IsConnected() && u == connected})
	}
	slices.SortFunc(in.Servers, func(a, b NATSServer) int { return strings.Compare(a.URL, b.URL) })
	ictx, cancel := context.WithTimeout(ctx, c.opts.APITimeout)
	defer cancel()
	info, err := c.stream.Info(ictx)
	switch {
	case err != nil:
		in.StreamError = err.Error()
	case info.Cluster == nil:
		in.StreamLeader = c.nc.ConnectedServerName() // a server alone leads its streams
	default:
		in.StreamLeader = info.Cluster.Leader
		if in.StreamLeader == "" {
			in.StreamError = errNoLeader.Error()
		}
		for _, r := range info.Cluster.Replicas {
			in.Replicas = append(in.Replicas, StreamReplica{Name: r.Name, Current: r.Current, Offline: r.Offline, Active: r.Active, Lag: r.Lag})
		}
	}
	return in
}

// redact drops the user information of a server URL.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	u.User = nil
	return u.String()
}
