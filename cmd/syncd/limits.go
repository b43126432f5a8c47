package main

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// limitOptions are the flags of server.Config's limits that have no flag
// of their own in parseFlags: the per-session request limit, the
// committer's tenant weights and metric labels, the session and snapshot
// timeouts and caps, and the HTTP listeners' timeouts. Each flag's default
// is the server's (0 would mean the same).
type limitOptions struct {
	requestsPerSecond      float64
	requestBurst           int
	tenantWeights          tenantWeights
	maxTenantLabels        int
	helloTimeout           time.Duration
	idleTimeout            time.Duration
	writeTimeout           time.Duration
	frameReadTimeout       time.Duration
	tokenRecheck           time.Duration
	maxConcurrentSnapshots int
	maxQueuedSnapshots     int
	snapshotQueueTimeout   time.Duration
	maxSnapshotsPerTenant  int
	sessionWorkTurns       int
	snapshotShareBytes     int
	snapshotTimeout        time.Duration
	snapshotWriteTimeout   time.Duration
	http                   server.HTTPTimeouts
}

func (o *limitOptions) register(fs *flag.FlagSet) {
	fs.Float64Var(&o.requestsPerSecond, "requests-per-second", server.DefaultRequestsPerSecond, "requests one websocket session may send per second (announced in welcome): a backstop against a session spinning on cheap frames, above what one device doing awaited writes or a backlog replay sends")
	fs.IntVar(&o.requestBurst, "request-burst", server.DefaultRequestBurst, "burst of --requests-per-second")
	fs.Var(&o.tenantWeights, "tenant-weight", fmt.Sprintf("a tenant's weight in the committer's fair order as TENANT=WEIGHT (1 to %d; tenants not named weigh 1): when the committer is saturated each tenant with pushes waiting gets mutations committed in proportion to its weight, and takes that many snapshot turns a round; repeatable", server.MaxTenantWeight))
	fs.IntVar(&o.maxTenantLabels, "max-tenant-labels", server.DefaultMaxTenantLabels, "tenants, beyond those of --tenant-weight, given their own tenant label in the syncd_commit_*, syncd_snapshot_turns_* and syncd_work_turns_* metrics (the first seen); the others share the label ~other; negative: none")
	fs.DurationVar(&o.helloTimeout, "hello-timeout", server.DefaultHelloTimeout, "how long a session may take to send hello after the upgrade")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", syncproto.DefaultIdleTimeout, "close a session that sent nothing for this long (announced in welcome)")
	fs.DurationVar(&o.writeTimeout, "write-timeout", server.DefaultWriteTimeout, "how long a client may take to take one frame the server writes, or answer a keepalive ping, before its connection is cut")
	fs.DurationVar(&o.frameReadTimeout, "frame-read-timeout", server.DefaultFrameReadTimeout, "how long a frame may take to arrive whole once it started (a wait for the frame budgets not counted)")
	fs.DurationVar(&o.tokenRecheck, "token-recheck", server.DefaultTokenRecheck, "how often an open session checks that its token was not revoked")
	fs.IntVar(&o.maxConcurrentSnapshots, "max-concurrent-snapshots", server.DefaultMaxConcurrentSnapshots, "snapshots served at once; more wait their turn")
	fs.IntVar(&o.maxQueuedSnapshots, "max-queued-snapshots", server.DefaultMaxQueuedSnapshots, "snapshots waiting for a turn; beyond it 503 server_busy (negative: none wait)")
	fs.DurationVar(&o.snapshotQueueTimeout, "snapshot-queue-timeout", server.DefaultSnapshotQueueTimeout, "the longest a snapshot waits for its turn before 503 server_busy")
	fs.IntVar(&o.maxSnapshotsPerTenant, "max-snapshots-per-tenant", server.DefaultMaxSnapshotsPerTenant, "snapshots of one tenant running or waiting; beyond it 503 server_busy (negative: no cap)")
	fs.IntVar(&o.sessionWorkTurns, "session-work-turns", 0, "frames the sessions decode and admit, and feed pages they build, at once; beyond it a session waits, parked, for a turn that goes round the tenants with work waiting by --tenant-weight (0: the processors, GOMAXPROCS; negative: no cap)")
	fs.IntVar(&o.snapshotShareBytes, "snapshot-share-bytes", server.DefaultSnapshotShareBytes, "bytes of body a snapshot read shared by several devices keeps for its slowest reader")
	fs.DurationVar(&o.snapshotTimeout, "snapshot-timeout", server.DefaultSnapshotTimeout, "the longest one snapshot download may take")
	fs.DurationVar(&o.snapshotWriteTimeout, "snapshot-write-timeout", server.DefaultSnapshotWriteTimeout, "the longest each write of a snapshot body may take")
	fs.DurationVar(&o.http.ReadHeader, "http-read-header-timeout", server.ReadHeaderTimeout, "how long a request's headers may take to arrive (public and admin listeners)")
	fs.DurationVar(&o.http.Read, "http-read-timeout", server.ReadTimeout, "how long a whole HTTP request may take to arrive")
	fs.DurationVar(&o.http.Write, "http-write-timeout", server.WriteTimeout, "how long an HTTP response may take to write (a snapshot extends it per write)")
	fs.DurationVar(&o.http.Idle, "http-idle-timeout", server.IdleTimeout, "close a kept-alive HTTP connection idle this long")
}

// apply sets cfg's limits from o.
func (o *limitOptions) apply(cfg *server.Config) {
	cfg.RequestsPerSecond, cfg.RequestBurst = o.requestsPerSecond, o.requestBurst
	cfg.TenantWeights, cfg.MaxTenantLabels = o.tenantWeights, o.maxTenantLabels
	cfg.HelloTimeout, cfg.IdleTimeout, cfg.WriteTimeout = o.helloTimeout, o.idleTimeout, o.writeTimeout
	cfg.FrameReadTimeout, cfg.TokenRecheck = o.frameReadTimeout, o.tokenRecheck
	cfg.MaxConcurrentSnapshots, cfg.MaxQueuedSnapshots = o.maxConcurrentSnapshots, o.maxQueuedSnapshots
	cfg.SnapshotQueueTimeout, cfg.MaxSnapshotsPerTenant = o.snapshotQueueTimeout, o.maxSnapshotsPerTenant
	cfg.SnapshotShareBytes, cfg.SnapshotTimeout, cfg.SnapshotWriteTimeout = o.snapshotShareBytes, o.snapshotTimeout, o.snapshotWriteTimeout
	cfg.SessionWorkTurns = o.sessionWorkTurns
	cfg.HTTPTimeouts = o.http
}

// tenantWeights is the repeatable --tenant-weight TENANT=WEIGHT flag.
type tenantWeights map[string]int

func (w *tenantWeights) String() string {
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(*w)) {
		parts = append(parts, fmt.Sprintf("%s=%d", t, (*w)[t]))
	}
	return strings.Join(parts, ",")
}

func (w *tenantWeights) Set(v string) error {
	tenant, weight, ok := strings.Cut(v, "=")
	n, err := strconv.Atoi(weight)
	if !ok || tenant == "" || err != nil || n < 1 || n > server.MaxTenantWeight {
		return fmt.Errorf("%q: want TENANT=WEIGHT with a weight from 1 to %d", v, server.MaxTenantWeight)
	}
	if *w == nil {
		*w = tenantWeights{}
	}
	(*w)[tenant] = n
	return nil
}
