package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// streamMsg is one command as a replica of the stream holds it.
type streamMsg struct {
	seq     uint64
	pending uint64    // messages after it the replica held when it was read
	at      time.Time // when the stream stored it (its leader's clock, the same on every replica); zero when the header is missing
	auth    string    // its HeaderAuth header
	data    []byte
}

// replicaReader reads the command stream with JetStream's direct get,
// which every current replica of the stream answers, not only its leader
// (NATS hands each read to one of them).
//
// That is what keeps a node applying while the cluster loses a server:
// a consumer lives on one server and is recreated through the metadata
// leader, so losing either (the stream's leader, the metadata leader, or
// the server holding the consumer) stalled the node's materializer until
// an election (4 to 9 seconds in NATS) and a recreation. A read needs
// neither: any live replica answers with what it holds, and a replica
// holds only what the stream committed. The one reader belongs to the
// materializer's goroutine.
type replicaReader struct {
	nc      *nats.Conn
	sub     *nats.Subscription
	inbox   string // the prefix of every read's reply subject
	subject string // the stream's direct get subject
	n       uint64 // reads sent, to tell a late answer from the current one
}

// maxReadBytes bounds one read's messages (a read returns at least one,
// whatever its size).
const maxReadBytes = 4 << 20

// directGetRequest is JetStream's batched direct get: up to Batch messages
// from Seq on, skipping none the stream holds.
type directGetRequest struct {
	Seq      uint64 `json:"seq"`
	Batch    int    `json:"batch"`
	MaxBytes int    `json:"max_bytes"`
}

// Headers of a direct get's answers.
const (
	hdrStatus     = "Status"
	hdrSequence   = "Nats-Sequence"
	hdrTimeStamp  = "Nats-Time-Stamp"
	hdrNumPending = "Nats-Num-Pending"
)

func newReplicaReader(nc *nats.Conn) (*replicaReader, error) {
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox + ".*")
	if err != nil {
		return nil, fmt.Errorf("subscribe to the stream reader's inbox: %w", err)
	}
	// The answers of one read are at most maxApplyGroup messages and
	// maxReadBytes plus one message; late answers of abandoned reads
	// add to that. Let none be dropped as a slow consumer.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("subscribe to the stream reader's inbox: %w", err)
	}
	return &replicaReader{nc: nc, sub: sub, inbox: inbox, subject: "$JS.API.DIRECT.GET." + StreamName}, nil
}

func (r *replicaReader) close() { r.sub.Unsubscribe() }

// errNoReplica: no server answers direct gets of the stream, as while
// every replica is catching up. Retried.
var errNoReplica = errors.New("no replica of the command stream answers reads")

// read returns up to maxApplyGroup messages from seq on, in stream order,
// as a replica holds them: none when it holds nothing at or after seq.
// The first may be past seq if the stream no longer holds seq.
func (r *replicaReader) read(ctx context.Context, seq uint64) ([]streamMsg, error) {
	r.n++
	reply := r.inbox + "." + strconv.FormatUint(r.n, 10)
	req, err := json.Marshal(directGetRequest{Seq: seq, Batch: maxApplyGroup, MaxBytes: maxReadBytes})
	if err != nil {
		return nil, err
	}
	if err := r.nc.PublishRequest(r.subject, reply, req); err != nil {
		return nil, fmt.Errorf("read the command stream: %w", err)
	}
	var out []streamMsg
	for {
		msg, err := r.sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the command stream from seq %d: %w", seq, err)
		}
		if msg.Subject != reply {
			continue // the answer of a read that timed out
		}
		if status := msg.Header.Get(hdrStatus); status != "" && len(msg.Data) == 0 {
			switch status {
			case "404", "204": // nothing at or after seq; the end of the batch
				return out, nil
			case "503":
				return nil, errNoReplica
			default:
				return nil, fmt.Errorf("read the command stream from seq %d: %s %s", seq, status, msg.Header.Get("Description"))
			}
		}
		m, err := parseStreamMsg(msg)
		if err != nil {
			return nil, fmt.Errorf("read the command stream from seq %d: %w", seq, err)
		}
		out = append(out, m)
	}
}

func parseStreamMsg(msg *nats.Msg) (streamMsg, error) {
	seq, err := strconv.ParseUint(msg.Header.Get(hdrSequence), 10, 64)
	if err != nil {
		return streamMsg{}, fmt.Errorf("%w: a message without a valid %s", ErrBadCommand, hdrSequence)
	}
	m := streamMsg{seq: seq, data: msg.Data, auth: msg.Header.Get(HeaderAuth)}
	if p := msg.Header.Get(hdrNumPending); p != "" {
		m.pending, _ = strconv.ParseUint(p, 10, 64) // for the lag metric only
	}
	// The command's stream time: its checks' reference (check) and the lag
	// metric's. A header that does not parse leaves it zero, which check
	// refuses.
	m.at, _ = time.Parse(time.RFC3339Nano, msg.Header.Get(hdrTimeStamp))
	return m, nil
}
