package server

import (
	"context"
	"errors"
	"time"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/syncproto"
)

// clusterCommitter is a cluster node's committer: it publishes the edge's
// batches to the command stream and answers each once this node's
// materializer applied it.
type clusterCommitter struct {
	cluster *cluster.Cluster
	metrics *metrics
	now     func() time.Time
}

func (c clusterCommitter) submit(ctx context.Context, b *replication.Batch) (*pushRequest, error) {
	r := newPushRequest(b, c.now())
	err := c.cluster.Submit(ctx, b, func(fx replication.Effects, err error) {
		r.fx, r.err = fx, err
		if err == nil {
			c.metrics.countDecided(&fx)
		}
		c.metrics.applySeconds.Observe(c.now().Sub(r.arrived).Seconds())
		close(r.done)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (c clusterCommitter) close() { c.cluster.Close() }

// catchUpTimeout bounds how long a cluster node waits to reach a client's
// cursor before judging it: a client that moved here from a node further
// ahead is not told its cursor is wrong while this node catches up.
const catchUpTimeout = 5 * time.Second

// catchUp waits, on a cluster node, until this node's oplog reaches cursor
// or catchUpTimeout passes. On a single node it returns at once.
func (s *Server) catchUp(ctx context.Context, cursor uint64) {
	if s.cfg.Cluster == nil || cursor == 0 {
		return
	}
	select {
	case <-s.store.Log.Notify(cursor - 1):
		return
	default:
	}
	wctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	_ = s.store.Log.Wait(wctx, cursor-1)
}

// pushRefusalCode is the code of a push that was not decided (err: the
// committer did not take it, or took it and cannot say): shutting_down
// while syncd closes; server_busy when this cluster node does not serve
// (cluster.ErrNotServing: its configuration differs from the cluster's,
// its stream drifted, it diverged), a retryable answer that sends the
// device to another node; internal otherwise. Each says nothing was
// applied, so the device resends.
func pushRefusalCode(err error) syncproto.Code {
	switch {
	case errors.Is(err, errStoreClosed):
		return syncproto.CodeShuttingDown
	case errors.Is(err, cluster.ErrNotServing):
		return syncproto.CodeServerBusy
	default:
		return syncproto.CodeInternal
	}
}
