package syncproto

import (
	"math"
	"time"
)

// Subprotocol is the websocket subprotocol a client must offer and the server
// selects. A future incompatible protocol gets a new name.
const Subprotocol = "syncproto.v1"

// Endpoint paths on the syncd listener.
const (
	// SyncPath is the websocket endpoint.
	SyncPath = "/v1/sync"
	// SnapshotPath serves the NDJSON snapshot a client resyncs from.
	SnapshotPath = "/v1/snapshot"
)

// Protocol limits. A receiver refuses anything beyond them with the code
// named beside each; a server may announce tighter values in Welcome.Limits,
// and a client must honour the announced values.
const (
	// MaxFrameBytes bounds one websocket frame in either direction
	// (CodeFrameTooLarge, close CloseMessageTooBig). Receivers set their
	// websocket read limit to at least this.
	MaxFrameBytes = 4 << 20
	// MaxBatch bounds the mutations in one push (CodeBatchTooLarge).
	MaxBatch = 500
	// MaxPayloadBytes bounds one mutation's value, counted as the raw JSON
	// bytes sent (CodePayloadTooLarge).
	MaxPayloadBytes = 256 << 10
	// MaxKeyBytes bounds a key in UTF-8 bytes (CodeInvalidKey).
	MaxKeyBytes = 512
	// MaxModelBytes bounds a model name; see ModelPattern (CodeInvalidModel).
	MaxModelBytes = 64
	// MaxIDBytes bounds a client id, node id or timestamp origin; see
	// IDPattern.
	MaxIDBytes = 64
	// MaxRequestIDBytes bounds a request id (CodeBadRequest).
	MaxRequestIDBytes = 64
	// MaxPullLimit bounds pull's limit, and the entries in any one changes
	// message (CodeBadRequest).
	MaxPullLimit = 1000
	// DefaultPullLimit is the page size when pull's limit is 0 or absent,
	// and the page size of a subscription's catch-up.
	DefaultPullLimit = 100
	// MaxMessageBytes bounds the human-readable message of an error or
	// result; longer text is cut by the sender.
	MaxMessageBytes = 1024
	// MaxValueDepth bounds how deeply a mutation's value nests arrays and
	// objects (CodeBadRequest), so that every stored value, and every
	// answer carrying one, decodes in every JSON implementation.
	MaxValueDepth = 32
	// MaxFrameDepth bounds how deeply a whole frame nests arrays and
	// objects, the message object being level 1: a deeper frame cannot be
	// decoded and is CodeMalformed (close CloseProtocolError). It is the
	// limit of Go's encoding/json, which the reference decoder uses; a
	// value within MaxValueDepth is always far inside it.
	MaxFrameDepth = 10000
	// MaxSafeInteger bounds every integer field (cursor, seq, version,
	// base_version): 2^53-1, so that a client whose JSON numbers are IEEE
	// doubles reads them exactly.
	MaxSafeInteger = 1<<53 - 1
)

// Defaults for the server-configurable limits announced in Welcome.Limits.
const (
	// DefaultMaxClockSkew is how far ahead of the server's clock a
	// mutation's hlc may be before CodeClockSkew.
	DefaultMaxClockSkew = time.Minute
	// DefaultIdleTimeout is how long a server waits without receiving a
	// frame before closing the connection with CloseIdleTimeout.
	DefaultIdleTimeout = 90 * time.Second
)

// Limits are the values a server enforces on this connection, announced in
// welcome. Zero in a rate field means no limit.
type Limits struct {
	MaxFrameBytes     int `json:"max_frame_bytes"`
	MaxBatch          int `json:"max_batch"`
	MaxPayloadBytes   int `json:"max_payload_bytes"`
	MaxKeyBytes       int `json:"max_key_bytes"`
	MaxPullLimit      int `json:"max_pull_limit"`
	MaxRequestIDBytes int `json:"max_request_id_bytes"`
	// MaxClockSkewMS is how far ahead of the server's clock, in
	// milliseconds, a mutation's hlc may be.
	MaxClockSkewMS int64 `json:"max_clock_skew_ms"`
	// IdleTimeoutMS is how long the server waits without receiving a frame
	// before it closes the connection; a client with nothing to send sends
	// ping at least every IdleTimeoutMS/2.
	IdleTimeoutMS int64 `json:"idle_timeout_ms"`
	// RequestsPerSecond is the sustained request rate allowed per
	// connection; 0 means unlimited.
	RequestsPerSecond float64 `json:"requests_per_second,omitempty"`
	// RequestBurst is how many requests may arrive at once above the rate.
	RequestBurst int `json:"request_burst,omitempty"`
	// LedgerRetentionMS is how long, in milliseconds after the server
	// decided an op, its replay ledger keeps the decision at least while
	// the tenant's decision count stays under the server's bound; 0
	// (absent) means the server did not say.
	LedgerRetentionMS int64 `json:"ledger_retention_ms,omitempty"`
	// MaxScopeValues bounds the scope values one subscription follows
	// (DefaultMaxScopeValues when the server declares scopes); 0 (absent):
	// the server declares none.
	MaxScopeValues int `json:"max_scope_values,omitempty"`
}

// DefaultLimits returns the protocol maxima with the default skew and idle
// timeout and no rate limit.
func DefaultLimits() Limits {
	return Limits{
		MaxFrameBytes:     MaxFrameBytes,
		MaxBatch:          MaxBatch,
		MaxPayloadBytes:   MaxPayloadBytes,
		MaxKeyBytes:       MaxKeyBytes,
		MaxPullLimit:      MaxPullLimit,
		MaxRequestIDBytes: MaxRequestIDBytes,
		MaxClockSkewMS:    DefaultMaxClockSkew.Milliseconds(),
		IdleTimeoutMS:     DefaultIdleTimeout.Milliseconds(),
	}
}

// Validate reports whether every size limit is positive and within the
// protocol maximum, the durations positive, and the rate fields
// non-negative. The error is an *Error with CodeBadRequest.
func (l Limits) Validate() error {
	sizes := []struct {
		name     string
		got, max int
	}{
		{"max_frame_bytes", l.MaxFrameBytes, MaxFrameBytes},
		{"max_batch", l.MaxBatch, MaxBatch},
		{"max_payload_bytes", l.MaxPayloadBytes, MaxPayloadBytes},
		{"max_key_bytes", l.MaxKeyBytes, MaxKeyBytes},
		{"max_pull_limit", l.MaxPullLimit, MaxPullLimit},
		{"max_request_id_bytes", l.MaxRequestIDBytes, MaxRequestIDBytes},
	}
	for _, s := range sizes {
		if s.got < 1 || s.got > s.max {
			return Errorf(CodeBadRequest, "limits.%s = %d outside 1..%d", s.name, s.got, s.max)
		}
	}
	if l.MaxClockSkewMS < 1 || l.MaxClockSkewMS > MaxSafeInteger {
		return Errorf(CodeBadRequest, "limits.max_clock_skew_ms = %d must be positive", l.MaxClockSkewMS)
	}
	if l.IdleTimeoutMS < 1 || l.IdleTimeoutMS > MaxSafeInteger {
		return Errorf(CodeBadRequest, "limits.idle_timeout_ms = %d must be positive", l.IdleTimeoutMS)
	}
	if !(l.RequestsPerSecond >= 0) || math.IsInf(l.RequestsPerSecond, 1) || l.RequestBurst < 0 {
		return Errorf(CodeBadRequest, "limits rate fields must be finite and not negative")
	}
	return nil
}
