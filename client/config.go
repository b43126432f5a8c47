package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/client/reconnect"
	"github.com/syncd-dev/syncd/syncproto"
)

// Defaults of Config's zero fields.
const (
	DefaultRetryInterval    = 2 * time.Second
	DefaultMaxRetryInterval = time.Minute
	DefaultOutcomeRetention = 30 * 24 * time.Hour
	DefaultProbeInterval    = 5 * time.Second
	// DefaultOfflineProbeInterval is short so that the first write after
	// the server returns is replayed within a second.
	DefaultOfflineProbeInterval = 400 * time.Millisecond
	// DefaultMaxSnapshotBytes bounds the bytes of one snapshot the client
	// reads, and DefaultSnapshotTimeout how long it may take.
	DefaultMaxSnapshotBytes = 4 << 30
	DefaultSnapshotTimeout  = 30 * time.Minute
)

// Config configures a Client. Every field not marked required has a
// default for its zero value.
type Config struct {
	// ServerURLs are syncd base URLs (http://, https://, ws:// or wss://,
	// e.g. "http://127.0.0.1:8080"). Required. When one is unreachable
	// the client moves to the next.
	ServerURLs []string
	// Credential is the device credential ("sdc_<client id>@<token>",
	// see syncctl token issue --credential): the one setting that carries
	// both Token and ClientID. Set it, or both of them.
	Credential string
	// Token is the bearer token (see syncctl token issue). Required unless
	// Credential or TokenSource is set.
	Token string
	// TokenSource, instead of Token, supplies the bearer token (a JWT from
	// the app's identity provider): asked before the first connection,
	// again at the token's refresh time before its exp (read without
	// verifying; TokenRefreshMargin says when), connected or not, and
	// after the server refused the token (token_expired, unauthorized);
	// the client then reconnects with the fresh token without dropping or
	// charging a queued write. An error leaves the
	// client offline, retrying with backoff, and shows in
	// Status.LastError as a *TokenSourceError. It is called from the
	// client's goroutines, one call at a time.
	TokenSource func(ctx context.Context) (string, error)
	// ClientID is the client id the token acts as. Required unless
	// Credential is set.
	ClientID string
	// Queue is the durable outbox (offlinequeue.OpenFile or OpenSQLite).
	// Required. The client owns it from Open on: it closes it on Close, and
	// Open closes it when it fails.
	Queue offlinequeue.Queue
	// ReplicaPath is the local replica's SQLite file. Required unless Queue
	// is a SQLite queue (offlinequeue.OpenSQLite): then the replica lives
	// in the queue's database file, so that a write and its pending
	// overlay row are one commit. A replica file an earlier version kept
	// at ReplicaPath beside a SQLite queue is moved into the queue's file
	// at Open (in one commit) and then removed.
	ReplicaPath string
	// ReplicaSynchronous is the durability of a replica in its own file
	// (ReplicaPath); the zero value is offlinequeue.SyncFull. A replica in
	// a SQLite queue's file has the queue's level
	// (offlinequeue.SQLiteOptions.Synchronous) instead. SyncNormal
	// survives a process crash; a power cut or an OS crash may roll back
	// the newest commits (recent outcomes, pending rows and feed entries,
	// which the queue, the server's ledger and the feed give back on the
	// next sync), never corrupt the file.
	ReplicaSynchronous offlinequeue.Synchronous
	// ConflictHandler decides optimistic conflicts; nil drops the refused
	// write (its Outcome says conflict, with the winner).
	ConflictHandler ConflictHandler
	// MaxAttempts is the retry budget of a write the server refuses; 0
	// means DefaultMaxAttempts.
	MaxAttempts int
	// InFlight is how many push batches may await their answers at once;
	// 0 means DefaultInFlight.
	InFlight int
	// RetryInterval is the ceiling of the first wait before replaying
	// writes that were refused or left queued, or reconnecting after a
	// lost link; it doubles per consecutive failure up to
	// MaxRetryInterval. Each wait is uniform between half its ceiling and
	// the ceiling, and never below a retry hint of the server's
	// (reconnect.Backoff.Wait, the client's one jitter rule).
	RetryInterval    time.Duration
	MaxRetryInterval time.Duration
	// ProbeInterval is how often reachability is probed (GET /healthz)
	// while the server answers; 0 means DefaultProbeInterval.
	ProbeInterval time.Duration
	// OfflineProbeInterval is how often it is probed while the server does
	// not answer: how soon its return is noticed (two successes in a row
	// decide it, so a return is seen within about two of these, and the
	// queue replays at once). Each wait is uniform between half of it and
	// it, so devices that lost one server together do not probe it in
	// step. 0 means DefaultOfflineProbeInterval; it may not exceed
	// ProbeInterval.
	OfflineProbeInterval time.Duration
	// Backoff shapes reconnect attempts; zero fields mean reconnect's defaults.
	Backoff reconnect.Backoff
	// OutcomeRetention is how long decided writes' outcomes are kept.
	OutcomeRetention time.Duration
	// MaxSnapshotBytes and SnapshotTimeout bound one snapshot download: a
	// larger or slower one is abandoned with ErrSnapshotTooLarge or
	// ErrSnapshotTimeout and the replica is left as it was; 0 means the
	// defaults (DefaultMaxSnapshotBytes, DefaultSnapshotTimeout). Memory
	// does not grow with a snapshot: it is stored in pages of at most
	// about 1 MiB as it arrives (the bytes go to the replica's file).
	MaxSnapshotBytes int64
	SnapshotTimeout  time.Duration
	// HTTPClient dials websockets, probes and fetches snapshots; nil means
	// defaultHTTPClient. Do not give it a whole-request Timeout: that would
	// also bound reading a snapshot, and a large one would never finish.
	HTTPClient *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives the client's logs (never values or tokens); nil
	// discards them.
	Logger *slog.Logger
	// Registerer receives the client's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// ModelVersions declares, by model, the version of the value shape
	// this build writes (1..syncproto.MaxValueVersion); every write of the
	// model carries it (value_version), and a model not listed writes
	// version 1. A version never goes backwards: Open refuses one below
	// what an earlier Open of the replica declared (*VersionBackwardsError).
	ModelVersions map[string]uint64
}

// errMissing is wrapped by the error naming a required field left empty.
var errMissing = errors.New("is required")

func (c *Config) setDefaults() error {
	if err := c.applyCredential(); err != nil {
		return err
	}
	switch {
	case len(c.ServerURLs) == 0:
		return fmt.Errorf("field ServerURLs %w", errMissing)
	case c.Token == "" && c.TokenSource == nil:
		return fmt.Errorf("field Token (or TokenSource) %w", errMissing)
	case c.Token != "" && c.TokenSource != nil:
		return errors.New("set Token or TokenSource, not both")
	case c.Queue == nil:
		return fmt.Errorf("field Queue %w", errMissing)
	case c.ReplicaPath == "" && !replicaSharesQueue(c.Queue):
		return fmt.Errorf("field ReplicaPath %w (the queue is not a SQLite queue)", errMissing)
	}
	if err := syncproto.ValidateID(c.ClientID); err != nil {
		return fmt.Errorf("field ClientID: %w", err)
	}
	if err := validateModelVersions(c.ModelVersions); err != nil {
		return err
	}
	for _, u := range c.ServerURLs {
		if _, err := syncURL(u); err != nil {
			return err
		}
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.RetryInterval, DefaultRetryInterval)
	def(&c.MaxRetryInterval, DefaultMaxRetryInterval)
	def(&c.ProbeInterval, DefaultProbeInterval)
	def(&c.OfflineProbeInterval, min(DefaultOfflineProbeInterval, c.ProbeInterval))
	def(&c.OutcomeRetention, DefaultOutcomeRetention)
	def(&c.SnapshotTimeout, DefaultSnapshotTimeout)
	if c.MaxSnapshotBytes == 0 {
		c.MaxSnapshotBytes = DefaultMaxSnapshotBytes
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.InFlight == 0 {
		c.InFlight = DefaultInFlight
	}
	if c.MaxAttempts < 0 || c.InFlight < 0 || c.RetryInterval < 0 || c.MaxRetryInterval < c.RetryInterval || c.ProbeInterval < 0 || c.OfflineProbeInterval < 0 || c.OfflineProbeInterval > c.ProbeInterval || c.OutcomeRetention < 0 || c.MaxSnapshotBytes < 0 || c.SnapshotTimeout < 0 {
		return errors.New("limits and intervals must be positive (MaxRetryInterval >= RetryInterval)")
	}
	if c.HTTPClient == nil {
		c.HTTPClient = defaultHTTPClient()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// defaultHTTPClient bounds connecting and waiting for a response's header,
// not reading its body: a snapshot of a large tenant takes as long as it
// takes, and a path that goes silent mid-body is cut by the network
// monitor (going offline cancels the request's context).
func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = 30 * time.Second
	return &http.Client{Transport: t}
}
