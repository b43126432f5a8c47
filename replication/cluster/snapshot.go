package cluster

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncd-dev/syncd/internal/dirsync"
)

// snapshotName is the object holding the newest snapshot; each store
// replaces it.
const snapshotName = "state.db"

// takeSnapshot stores a consistent copy of this node's database (VACUUM
// INTO reads one snapshot of it, position included) in the object store,
// replacing the previous one, and returns the stream seq it holds. last is
// the seq of the snapshot this node stored before (0: none): when nothing
// was applied since, it stores nothing, since every replacement removes
// the chunks a restoring node may be reading. Only the lease holder calls
// it.
func (c *Cluster) takeSnapshot(ctx context.Context, last uint64) uint64 {
	if a := c.applied.Load(); last != 0 && a != nil && a.seq == last {
		return last
	}
	if err := c.Refuses(); err != nil {
		// Not a state to hand on: diverged, or restored records not
		// verified yet.
		c.log.Warn("snapshot not taken: this node does not serve", "err", err)
		return last
	}
	start := time.Now()
	applied, err := c.storeSnapshot(ctx)
	if err != nil {
		c.metrics.snapshots.WithLabelValues("failed").Inc()
		c.log.Warn("snapshot not stored", "err", err)
		return last
	}
	c.metrics.snapshots.WithLabelValues("stored").Inc()
	c.log.Info("snapshot stored", "applied_seq", applied, "took", time.Since(start))
	return applied
}

func (c *Cluster) storeSnapshot(ctx context.Context) (uint64, error) {
	dir, err := os.MkdirTemp(c.opts.SnapshotDir, "syncd-snapshot-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, snapshotName)
	if _, err := c.store.DB.ExecContext(ctx, `VACUUM INTO ?`, file); err != nil {
		return 0, fmt.Errorf("copy the database: %w", err)
	}
	pos, err := positionOfFile(ctx, file)
	if err != nil {
		return 0, err
	}
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	auth := c.snapshotMAC(pos.applied)
	if _, err := io.Copy(auth, f); err != nil {
		return 0, fmt.Errorf("authenticate the snapshot: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	_, err = c.objects.Put(ctx, jetstream.ObjectMeta{
		Name: snapshotName,
		Metadata: map[string]string{"applied_seq": strconv.FormatUint(pos.applied, 10), "cluster_id": c.id,
			metaSnapshotAuth: AuthScheme + hex.EncodeToString(auth.Sum(nil))},
	}, f)
	if err != nil {
		return 0, fmt.Errorf("upload: %w", err)
	}
	return pos.applied, nil
}

// metaSnapshotAuth is the snapshot object's metadata entry holding its
// authenticator: AuthScheme and the hex HMAC-SHA256, under a key derived
// from the command key, of the cluster id, the applied seq and the file
// (snapshotMAC).
const metaSnapshotAuth = "syncd.auth"

// ErrSnapshotUnverified is wrapped by PrepareData when the newest snapshot
// does not carry the authenticator of this cluster's command key over its
// contents and metadata: it was not stored by a node of this cluster (or
// was altered since). Nothing is restored and the node does not start;
// with no other snapshot, an operator restores a node's data by hand.
var ErrSnapshotUnverified = errors.New("snapshot not authenticated by this cluster's key")

// snapshotMAC returns the hash that authenticates a snapshot of this
// cluster at applied: write the file's bytes to it, then Sum.
func (c *Cluster) snapshotMAC(applied uint64) hash.Hash {
	h := hmac.New(sha256.New, deriveKey(c.opts.CommandKey, "syncd snapshot authenticator v1"))
	fmt.Fprintf(h, "syncd snapshot\ncluster %s\napplied %d\n", c.id, applied)
	return h
}

// positionOfFile reads the materializer's position in a database file.
func positionOfFile(ctx context.Context, file string) (position, error) {
	db, err := sql.Open("sqlite3", "file:"+file+"?mode=ro")
	if err != nil {
		return position{}, err
	}
	defer db.Close()
	return readPosition(ctx, db)
}

// ErrNoSnapshot is wrapped by PrepareData when this node must restore a
// snapshot (its data is missing or behind the stream's retention) and the
// cluster holds none recent enough. Take one on a healthy node
// (syncctl cluster snapshot) or widen the stream's retention.
var ErrNoSnapshot = errors.New("no usable snapshot")

// PrepareData makes the database file at path ready for this node before
// the store is opened: when the file is missing or empty and the stream
// no longer starts at its first message, or when the node's position is
// below the stream's first message (it was down longer than the stream's
// retention), it fetches the newest snapshot into path. A file that is
// behind is kept beside it (path + ".behind-<unix time>"), never deleted.
// It reports whether it restored.
func (c *Cluster) PrepareData(ctx context.Context, path string) (bool, error) {
	var info *jetstream.StreamInfo
	err := c.retry(ctx, "read the stream's bounds", func(ctx context.Context) (err error) {
		info, err = c.stream.Info(ctx)
		if err == nil && !FromLeader(info) {
			// This node's own NATS server, new after a lost disk, may
			// answer with its empty copy: a restore it needs would be
			// skipped.
			err = errNotSettled
		}
		return err
	})
	if err != nil {
		return false, err
	}
	first := info.State.FirstSeq
	var applied uint64
	exists := false
	if st, err := os.Stat(path); err == nil && st.Size() > 0 {
		exists = true
		pos, err := positionOfFile(ctx, path)
		if err != nil {
			return false, fmt.Errorf("read this node's position: %w", err)
		}
		applied = pos.applied
	}
	if applied+1 >= first || (!exists && first <= 1) {
		return false, nil // the stream holds everything this node has not applied
	}
	tmp := path + ".restoring"
	snapAt, err := c.downloadSnapshot(ctx, tmp, applied, first)
	if err != nil {
		os.Remove(tmp)
		return false, err
	}
	// Its records are compared with the peers' before it serves, however
	// authentic the snapshot: the mark says so across restarts.
	if err := markUnverified(ctx, tmp, snapAt); err != nil {
		os.Remove(tmp)
		return false, err
	}
	if err := syncFile(tmp); err != nil {
		return false, err
	}
	if exists {
		aside := fmt.Sprintf("%s.behind-%d", path, time.Now().Unix())
		if err := os.Rename(path, aside); err != nil {
			return false, err
		}
		c.log.Warn("this node was behind the stream's retention; its data was moved aside", "kept", aside, "applied", applied, "stream_first", first)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return false, err
	}
	if err := dirsync.Sync(filepath.Dir(path)); err != nil {
		return false, err
	}
	c.log.Info("restored the newest snapshot", "applied_seq", snapAt)
	return true, nil
}

// Bounds of a snapshot's download: each attempt reads the newest
// snapshot afresh.
//
// An attempt's time is bounded by the snapshot's size: a read of its info
// served stale by a replica catching up (the object store allows direct
// gets) names chunks a replacement removed, and waits for them in vain
// until the attempt's end.
const (
	restoreAttempts = 4
	// An attempt takes at most restoreAttemptBase plus the snapshot's
	// size at restoreMinRate, and never more than restoreAttemptTimeout.
	restoreAttemptTimeout = 2 * time.Minute
	restoreAttemptBase    = 20 * time.Second
	restoreMinRate        = 1 << 20 // bytes per second
)

// attemptTimeout is how long one download of a snapshot of size bytes may
// take.
func attemptTimeout(size uint64) time.Duration {
	return min(restoreAttemptBase+time.Duration(size/restoreMinRate)*time.Second, restoreAttemptTimeout)
}

// downloadSnapshot fetches the newest snapshot into file and returns the
// stream seq it holds. The lease holder replaces the snapshot while it may
// be read (a replacement removes the previous one's chunks), and a read
// that raced it fails its digest check or finds no chunks: each attempt
// reads the snapshot's info and its chunks as one object, bounded in
// time, and a failed one is retried from the start. ErrNoSnapshot when
// the cluster holds none recent enough for a node at applied, with the
// stream starting at first.
func (c *Cluster) downloadSnapshot(ctx context.Context, file string, applied, first uint64) (uint64, error) {
	var err error
	for attempt := 1; attempt <= restoreAttempts; attempt++ {
		var at uint64
		at, err = c.tryDownload(ctx, file, applied, first)
		if err == nil || errors.Is(err, ErrNoSnapshot) || ctx.Err() != nil {
			return at, err
		}
		c.log.Warn("snapshot download failed; reading the newest snapshot again", "attempt", attempt, "err", err)
		sleep(ctx, time.Duration(attempt)*time.Second)
	}
	return 0, fmt.Errorf("download the snapshot: %d attempts: %w", restoreAttempts, err)
}

// tryDownload is one attempt of downloadSnapshot.
func (c *Cluster) tryDownload(ctx context.Context, file string, applied, first uint64) (uint64, error) {
	ictx, cancel := context.WithTimeout(ctx, c.opts.APITimeout)
	info, err := c.objects.GetInfo(ictx, snapshotName)
	cancel()
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, fmt.Errorf("%w: this node is at %d, the stream starts at %d, and the cluster has no snapshot", ErrNoSnapshot, applied, first)
	}
	if err != nil {
		return 0, fmt.Errorf("read the snapshot's info: %w", err)
	}
	ctx, cancel = context.WithTimeout(ctx, attemptTimeout(info.Size))
	defer cancel()
	obj, err := c.objects.Get(ctx, snapshotName)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, fmt.Errorf("%w: this node is at %d, the stream starts at %d, and the cluster has no snapshot", ErrNoSnapshot, applied, first)
	}
	if err != nil {
		return 0, fmt.Errorf("read the snapshot: %w", err)
	}
	defer obj.Close()
	info, err = obj.Info() // what is read: perhaps newer than the size's
	if err != nil {
		return 0, fmt.Errorf("read the snapshot's info: %w", err)
	}
	if info.Metadata["cluster_id"] != c.id {
		return 0, fmt.Errorf("%w: the snapshot is of cluster %s, not %s", ErrNoSnapshot, info.Metadata["cluster_id"], c.id)
	}
	snapAt, _ := strconv.ParseUint(info.Metadata["applied_seq"], 10, 64)
	if snapAt+1 < first {
		return 0, fmt.Errorf("%w: the newest snapshot is at %d, the stream starts at %d", ErrNoSnapshot, snapAt, first)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	auth := c.snapshotMAC(snapAt)
	_, err = io.Copy(io.MultiWriter(f, auth), obj) // the object checks its digest at its end
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("download the snapshot: %w", err)
	}
	if want := AuthScheme + hex.EncodeToString(auth.Sum(nil)); !hmac.Equal([]byte(info.Metadata[metaSnapshotAuth]), []byte(want)) {
		return 0, fmt.Errorf("%w: the snapshot at stream seq %d (modified %s) does not carry its authenticator", ErrSnapshotUnverified, snapAt, info.ModTime.UTC().Format(time.RFC3339))
	}
	pos, err := positionOfFile(ctx, file)
	if err != nil {
		return 0, fmt.Errorf("read the snapshot's position: %w", err)
	}
	if pos.applied != snapAt {
		return 0, fmt.Errorf("the snapshot's file is at stream seq %d, its info says %d", pos.applied, snapAt)
	}
	return snapAt, nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
