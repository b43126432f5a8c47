package server

import (
	"log"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultEventLogInterval is Config.EventLogInterval's default.
const DefaultEventLogInterval = 10 * time.Second

// eventLog aggregates events that a peer can cause at will (refusals,
// authentication failures): instead of one line per event it writes, once
// per interval in which any happened, one line per kind of event with its
// count. The kinds are fixed strings and error codes, so the lines per
// interval are bounded whatever a peer sends.
type eventLog struct {
	log      *slog.Logger
	interval time.Duration

	mu     sync.Mutex
	counts map[eventKind]*eventCount
	timer  *time.Timer // pending flush; nil when nothing is counted
	closed bool
}

type eventKind struct{ msg, code string }

type eventCount struct {
	n          int
	lastRemote string
}

func newEventLog(log *slog.Logger, interval time.Duration) *eventLog {
	return &eventLog{log: log, interval: interval, counts: map[eventKind]*eventCount{}}
}

// add counts one event from remote; msg is the line's message, code its
// kind.
func (l *eventLog) add(msg, code, remote string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.counts[eventKind{msg, code}]
	if c == nil {
		c = &eventCount{}
		l.counts[eventKind{msg, code}] = c
	}
	c.n++
	c.lastRemote = remote
	if l.timer == nil && !l.closed {
		l.timer = time.AfterFunc(l.interval, l.flush)
	}
}

// flush writes the counts gathered since the last flush.
func (l *eventLog) flush() {
	l.mu.Lock()
	counts := l.counts
	l.counts, l.timer = map[eventKind]*eventCount{}, nil
	l.mu.Unlock()
	kinds := make([]eventKind, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b eventKind) int {
		return strings.Compare(a.msg+"\x00"+a.code, b.msg+"\x00"+b.code)
	})
	for _, k := range kinds {
		c := counts[k]
		l.log.Warn(k.msg, "code", k.code, "count", c.n, "last_remote", c.lastRemote, "interval", l.interval)
	}
}

// close writes what is counted and stops flushing; later events are
// counted but not written.
func (l *eventLog) close() {
	l.mu.Lock()
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.flush()
}

// ErrorLog is the logger of syncd's listeners (HTTPServer sets it): what
// net/http logs goes to Config.Logger at warn, except failed TLS
// handshakes, which any peer causes at will (a port scan, a plain-HTTP
// probe): those are counted in the event log, one "TLS handshake failed"
// line per interval with the count and the last peer.
func (s *Server) ErrorLog() *log.Logger {
	return log.New(httpErrorWriter{s}, "", 0)
}

// httpErrorWriter receives net/http's log lines, one per Write.
type httpErrorWriter struct{ s *Server }

func (w httpErrorWriter) Write(p []byte) (int, error) {
	line := strings.TrimSuffix(string(p), "\n")
	if rest, ok := strings.CutPrefix(line, "http: TLS handshake error from "); ok {
		remote, _, _ := strings.Cut(rest, ": ")
		w.s.events.add("TLS handshake failed", "tls_handshake", remote)
		return len(p), nil
	}
	w.s.log.Warn(line)
	return len(p), nil
}
