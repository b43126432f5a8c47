package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/adminapi"
)

// statusView is the --json output of syncctl status: the server's
// /v1/admin/status answer plus the newest conflict-log row, if any.
type statusView struct {
	adminapi.Status
	// LatestConflictID is the id of the newest conflict-log row; ids only
	// grow, so a rising value between two calls means new conflicts.
	LatestConflictID int64 `json:"latest_conflict_id,omitempty"`
	// LatestConflictAt is when that row was decided.
	LatestConflictAt time.Time `json:"latest_conflict_at,omitzero"`
}

func (a *app) statusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the server: node, uptime, connections, oplog, ledger, conflicts, lag",
		Args:  exactArgs(0, "no arguments"),
	}
	o := addAdminFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := a.adminClient(cmd, o)
		if err != nil {
			return err
		}
		v, err := fetchStatus(cmd.Context(), c)
		if err != nil {
			return err
		}
		if a.json {
			return printJSON(a.stdout, v)
		}
		return a.printStatus(v)
	}
	return cmd
}

func fetchStatus(ctx context.Context, c *adminClient) (statusView, error) {
	var v statusView
	if err := c.get(ctx, adminapi.PathStatus, nil, &v.Status); err != nil {
		return v, err
	}
	var newest []adminapi.Conflict
	if err := c.get(ctx, adminapi.PathConflicts, url.Values{"limit": {"1"}}, &newest); err != nil {
		return v, err
	}
	if len(newest) > 0 {
		v.LatestConflictID, v.LatestConflictAt = newest[0].ID, newest[0].DecidedAt
	}
	return v, nil
}

func (a *app) printStatus(v statusView) error {
	st := v.Status
	retained := uint64(0)
	if st.OplogHead >= st.OplogOldest {
		retained = st.OplogHead - st.OplogOldest + 1
	}
	floor := "none yet (no retention pass has evicted anything)"
	if !st.LedgerFloor.IsZero() {
		floor = stamp(st.LedgerFloor) + " (the newest tenant floor: no resend stamped later is answered expired)"
	}
	conflicts := "none recorded"
	if v.LatestConflictID > 0 {
		conflicts = fmt.Sprintf("newest #%d at %s (syncctl conflicts ls)", v.LatestConflictID, stamp(v.LatestConflictAt))
	}
	err := fields(a.stdout,
		[2]string{"node", st.NodeID},
		[2]string{"build", st.Build},
		[2]string{"database", st.DatabaseID},
		[2]string{"schema", "version " + strconv.Itoa(st.SchemaVersion)},
		[2]string{"started", fmt.Sprintf("%s (up %s)", stamp(st.StartedAt), (time.Duration(st.UptimeSeconds * float64(time.Second))).Round(time.Second))},
		[2]string{"draining", yesNo(st.Draining)},
		[2]string{"connections", strconv.Itoa(st.Connections)},
		[2]string{"oplog", fmt.Sprintf("head %d, oldest %d (%s retained)", st.OplogHead, st.OplogOldest, count(int(retained), "entry", "entries"))},
		[2]string{"ledger", count(st.LedgerEntries, "decision", "decisions")},
		[2]string{"ledger floor", floor},
		[2]string{"conflicts", conflicts},
		[2]string{"sync lag", fmt.Sprintf("%s behind the head (slowest connected client)", count(int(st.MaxClientLagEntries), "entry", "entries"))},
	)
	if err != nil || st.Cluster == nil {
		return err
	}
	return a.printCluster(st.Cluster)
}

// printCluster lists every node of the cluster as the answering node last
// heard of it: applied stream seq, lag, the lease, the format it announces
// and the cluster version it sees, and readiness.
func (a *app) printCluster(c *adminapi.ClusterStatus) error {
	lease := c.LeaseHolder
	if lease == "" {
		lease = "none reported"
	}
	if err := fields(a.stdout, [2]string{"cluster", c.ID}, [2]string{"lease holder", lease}); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)
	t := newTable(a.stdout, "NODE", "APPLIED", "STREAM HEAD", "LAG", "LEASE", "FORMAT", "VERSION", "READY", "REPORTED")
	for _, n := range c.Nodes {
		ready := "yes"
		if !n.Ready {
			ready = "no: " + n.Problem
		}
		t.row(n.Node, strconv.FormatUint(n.AppliedSeq, 10), strconv.FormatUint(n.StreamHead, 10),
			strconv.FormatUint(n.Lag, 10), yesNo(n.LeaseHeld), formatOf(n.Format), formatOf(n.ClusterVersion), ready, stamp(n.At))
	}
	return t.flush()
}

// formatOf shows a command stream format; 0 is a node of a release
// before formats, which understands the first.
func formatOf(f int) string {
	if f == 0 {
		return "1 (unannounced)"
	}
	return strconv.Itoa(f)
}
