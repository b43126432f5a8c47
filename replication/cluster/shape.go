package cluster

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrStreamDeleted is wrapped by Ready while the command stream is gone:
// someone deleted it. The node does not serve; nothing of the cluster's
// history can be read again from the stream. Restore the stream (or start
// a new cluster from a node's data) before the node serves again.
var ErrStreamDeleted = errors.New("the command stream was deleted")

// streamProblems lists how got, the command stream's configuration,
// differs from want, the one syncd creates, in the settings syncd relies
// on: each problem names its setting. Nothing is changed: an operator who
// meant the change sets the node's flags to match; one who did not
// restores the setting.
func streamProblems(got, want jetstream.StreamConfig) []string {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if got.Metadata[metaCluster] == "" {
		add("it carries no syncd cluster id (it was not created by syncd)")
	}
	if len(got.Subjects) != 1 || got.Subjects[0] != Subject {
		add("subjects %v, want [%s]", got.Subjects, Subject)
	}
	if got.Replicas != want.Replicas {
		add("%d replicas, this node is configured for %d", got.Replicas, want.Replicas)
	}
	if got.MaxMsgSize > 0 && got.MaxMsgSize < want.MaxMsgSize {
		add("max message size %d, syncd needs %d", got.MaxMsgSize, want.MaxMsgSize)
	}
	if got.Storage != jetstream.FileStorage {
		add("memory storage: acknowledged writes would not survive a restart")
	}
	if got.Retention != jetstream.LimitsPolicy {
		add("retention %s, want limits (every node reads every command)", got.Retention)
	}
	if got.MaxMsgs > 0 {
		add("max messages %d, want no bound (commands would be dropped before lagging nodes read them)", got.MaxMsgs)
	}
	if got.MaxMsgsPerSubject > 0 {
		add("max messages per subject %d, want no bound", got.MaxMsgsPerSubject)
	}
	if bound(got.MaxBytes) != bound(want.MaxBytes) {
		add("max bytes %d, this node is configured for %d (--stream-max-bytes)", bound(got.MaxBytes), bound(want.MaxBytes))
	}
	if got.MaxAge != want.MaxAge {
		add("max age %s, this node is configured for %s (--stream-max-age)", fmtAge(got.MaxAge), fmtAge(want.MaxAge))
	}
	if !got.DenyDelete {
		add("deny delete off: a message could be removed from the middle of the log")
	}
	if !got.DenyPurge {
		add("deny purge off: the log could be emptied")
	}
	if got.AllowRollup {
		add("rollups allowed: a message could purge the log")
	}
	return p
}

// bound is a stream limit with every "none" (0, -1) as -1.
func bound(v int64) int64 {
	if v <= 0 {
		return -1
	}
	return v
}

func fmtAge(d time.Duration) string {
	if d == 0 {
		return "unbounded"
	}
	return d.String()
}

// checkShape compares the stream's configuration, as a report just read
// it, with what this node requires, and refuses to serve while they
// differ (or the stream is gone), naming the settings; it serves again
// once they agree. infoErr is the report's error reading the stream.
func (c *Cluster) checkShape(info *jetstream.StreamInfo, infoErr error) {
	var problem error
	switch {
	case errors.Is(infoErr, jetstream.ErrStreamNotFound):
		problem = fmt.Errorf("%w: %s no longer exists (not a lost quorum: the servers answered that there is no such stream); this node does not serve", ErrStreamDeleted, StreamName)
	case infoErr != nil:
		return // no answer: waiting for quorum says so
	default:
		if p := streamProblems(info.Config, c.want); len(p) > 0 {
			problem = fmt.Errorf("%w: stream %s: %s", ErrMisconfigured, StreamName, joinProblems(p))
		}
	}
	if problem == nil {
		if c.misconfig.Swap(nil) != nil {
			c.log.Info("the command stream's settings are as syncd requires again")
			c.metrics.misconfigured.Set(0)
		}
		return
	}
	if prev := c.misconfig.Swap(&problem); prev == nil || (*prev).Error() != problem.Error() {
		c.log.Error("this node does not serve", "err", problem)
	}
	c.metrics.misconfigured.Set(1)
}
