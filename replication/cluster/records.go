package cluster

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Records checks: the running digest chains what each command did, so two
// nodes that applied the same commands agree on it whatever their records
// hold. A records check (the check_records job, FormatRecordsCheck) makes
// every node read its whole records table at the job's stream seq and
// chain a digest of it into its running digest, checkpointed there: the
// nodes then compare record contents through the digest checkpoints
// (judge), and every later checkpoint carries the comparison on.
//
// A node restored from a snapshot, or catching up from one, does not
// serve (ErrRecordsUnverified) until a records check at a seq after its
// restore agreed with its live peers: a record set altered in the
// snapshot or on its disk, however authentic the snapshot looked, makes
// its digest differ there, and it stops (DivergedError, Records).
//
// Cost: one read of the records table per node per check, inside the
// materializer's transaction. Checks come from the lease holder every
// RecordsCheckEvery and from a restored node every recordsCheckRetry
// until it is verified, and whoever publishes them, every node digests at
// most one per Options.RecordsCheckGap of stream time: a check closer to
// the last digested one is applied as a no-op, alike on every node.

// JobCheckRecords is the records check job (FormatRecordsCheck). It
// removes nothing; its Limit is 1 and its Token the lease's when the lease
// holder publishes it, 0 otherwise (it neither needs nor moves the jobs'
// fence).
const JobCheckRecords JobKind = "check_records"

// recordsCheckRetry is how often a restored node publishes a records check
// while it is not verified.
const recordsCheckRetry = 15 * time.Second

// metaUnverified marks a database restored from a snapshot whose records
// no check has verified yet; its value is the stream seq it was restored
// at.
const metaUnverified = "cluster_records_unverified"

// ErrRecordsUnverified is wrapped by Ready while this node restored a
// snapshot and no records check has agreed with its peers since.
var ErrRecordsUnverified = errors.New("records restored from a snapshot not yet compared with the peers'")

// digestRecords reads the records table in tx, in key order, and returns
// the SHA-256 of every replicated column of every row and the rows read.
// Each row reaches Go as one string, SQLite's quote() of each column
// joined by commas (strings quoted with their quotes doubled, blobs as
// X'hex', NULL as NULL: no two rows encode alike), which costs one value
// per row across the driver rather than twelve. Columns derived on each
// node are left out, so nodes of releases that add such columns agree.
func digestRecords(ctx context.Context, tx *sql.Tx) ([]byte, int64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT quote(tenant) || ',' || quote(model) || ',' || quote(key) || ',' || quote(value) || ',' ||
		quote(version) || ',' || quote(hlc) || ',' || quote(wall) || ',' || quote(logical) || ',' || quote(origin) || ',' ||
		quote(deleted) || ',' || quote(op_id) || ',' || quote(seq)
		FROM records ORDER BY tenant, model, key`)
	if err != nil {
		return nil, 0, fmt.Errorf("read the records: %w", err)
	}
	defer rows.Close()
	h := sha256.New()
	var n int64
	var row sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&row); err != nil {
			return nil, 0, fmt.Errorf("read the records: %w", err)
		}
		h.Write(row)
		h.Write([]byte{'\n'})
		n++
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read the records: %w", err)
	}
	return h.Sum(nil), n, nil
}

// chainRecords is the running digest after a records check at seq read
// records, whose digest is digest.
func chainRecords(prev []byte, seq uint64, digest []byte) []byte {
	h := sha256.New()
	h.Write(prev)
	h.Write(binary.BigEndian.AppendUint64(nil, seq))
	h.Write([]byte("records "))
	h.Write(digest)
	return h.Sum(nil)
}

// checkRecords applies a records check stored at at inside tx: the
// records digest when it is digested, nil when it comes within
// RecordsCheckGap of the last one (a no-op).
func (m *materializer) checkRecords(ctx context.Context, tx *sql.Tx, pos *position, at time.Time) ([]byte, error) {
	c := m.c
	if pos.checkAt != 0 && at.Sub(time.Unix(0, pos.checkAt)) < c.opts.RecordsCheckGap {
		c.metrics.jobs.WithLabelValues(string(JobCheckRecords), "too_soon").Inc()
		return nil, nil
	}
	start := time.Now()
	digest, rows, err := digestRecords(ctx, tx)
	if err != nil {
		return nil, err
	}
	pos.checkAt = at.UnixNano()
	c.metrics.jobs.WithLabelValues(string(JobCheckRecords), "applied").Inc()
	c.log.Info("records check", "records", rows, "took", time.Since(start))
	return digest, nil
}

// publishRecordsCheck publishes a records check with token (the lease's,
// or 0). ErrFormatNotInUse while some node does not understand it.
func (c *Cluster) publishRecordsCheck(ctx context.Context, token uint64) error {
	_, err := c.publish(ctx, Command{ID: uuid.NewString(), Job: &Job{Kind: JobCheckRecords, Token: token, Now: c.opts.Now().UTC(), Limit: 1}})
	return err
}

// markUnverified marks the database file at path, just restored at stream
// seq at, as waiting for a records check.
func markUnverified(ctx context.Context, path string, at uint64) error {
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `INSERT INTO syncd_meta (name, value) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, metaUnverified, formatSeq(at)); err != nil {
		return fmt.Errorf("mark the restored records unverified: %w", err)
	}
	return nil
}

// readUnverified reports whether db's records wait for a records check.
func readUnverified(ctx context.Context, db *sql.DB) (bool, error) {
	var v string
	err := db.QueryRowContext(ctx, `SELECT value FROM syncd_meta WHERE name = ?`, metaUnverified).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read whether the records are verified: %w", err)
	}
	return true, nil
}

// verifyRecords runs while this node's restored records are not verified:
// it publishes a records check every recordsCheckRetry (once the cluster
// version allows it) until the report loop saw one agree (recordsVerified).
func (c *Cluster) verifyRecords(ctx context.Context) {
	for c.unverified.Load() && ctx.Err() == nil {
		if c.uses(FormatRecordsCheck) {
			if err := c.publishRecordsCheck(ctx, 0); err != nil && ctx.Err() == nil {
				c.log.Warn("records check not published", "err", err)
			}
		}
		sleep(ctx, recordsCheckRetry)
	}
}

// recordsVerified ends this node's wait for a records check: the check at
// seq agreed with peers (none when alone).
func (c *Cluster) recordsVerified(ctx context.Context, seq uint64, peers []string) {
	if !c.unverified.Load() {
		return
	}
	if _, err := c.store.DB.ExecContext(ctx, `DELETE FROM syncd_meta WHERE name = ?`, metaUnverified); err != nil {
		c.log.Warn("records verified, but the mark could not be cleared; the next start checks again", "err", err)
	}
	c.unverified.Store(false)
	c.metrics.recordsUnverified.Set(0)
	if len(peers) == 0 {
		c.log.Warn("restored records checked with no live peer to compare with; this node serves", "seq", seq)
		return
	}
	c.log.Info("restored records agree with the peers'; this node serves", "seq", seq, "peers", peers)
}

// unverifiedError is Ready's answer while the records wait for a check.
func (c *Cluster) unverifiedError() error {
	if !c.uses(FormatRecordsCheck) {
		return fmt.Errorf("%w: a records check needs format %d (records_check) on every node, the cluster version is %d: upgrade the older nodes", ErrRecordsUnverified, FormatRecordsCheck, c.version.Load())
	}
	return fmt.Errorf("%w: waiting for a records check to agree with the peers (one is published every %s)", ErrRecordsUnverified, recordsCheckRetry)
}
